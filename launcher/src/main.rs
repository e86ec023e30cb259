//! `rgrind`: the Valgrind-compatible command line in front of the translator and the tools.
mod cli;
mod gnu_demangle;
mod guest_env;
mod log;
mod tools;

use cli::{Command, Settings, ToolName};
use std::ffi::OsString;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// mimalloc, not glibc's malloc: translation, the tools' per-block records and the dump make
/// hundreds of thousands of small allocations per run, and glibc's spent ~12% of a short
/// callgrind run in them (ARCHITECTURE.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn fail(lines: &[String]) -> ! {
    for l in lines {
        eprintln!("rgrind: {l}");
    }
    std::process::exit(1);
}

/// `rgrind annotate|diff|merge ...`: the profile-file subcommands, done by the dumper.
const SUBCOMMANDS: [&str; 3] = ["annotate", "diff", "merge"];

fn main() {
    // Rust's runtime ignores SIGPIPE; rgrind (`annotate | head`) and the guest get the default.
    // SAFETY: signal() with SIG_DFL has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some(name) = args
        .first()
        .and_then(|a| a.to_str())
        .filter(|a| SUBCOMMANDS.contains(a))
    {
        match dumper::run_subcommand(name, &args[1..]) {
            Ok(status) => std::process::exit(status),
            Err(e) => fail(&[e.to_string()]),
        }
    }
    let (defaults, warnings) = cli::default_options();
    let parsed = cli::parse(&defaults, &args);
    if matches!(&parsed, Ok(Command::Run(s)) if s.tool != ToolName::None) {
        // May run rgrind again (before anything is printed) with a fixed layout.
        dbt_core::layout::fix();
    }
    for w in warnings {
        eprintln!("rgrind: warning: {w}");
    }
    let settings = match parsed {
        Ok(Command::Run(s)) => s,
        Ok(Command::Help(tool)) => {
            print!("{}", cli::usage(tool.as_deref()));
            return;
        }
        Ok(Command::Version) => {
            println!("rgrind-{VERSION} (valgrind-3.19.0 compatible)");
            return;
        }
        Err(e) => fail(&e.lines()),
    };
    run(settings)
}

fn run(s: Settings) -> ! {
    if s.tool != ToolName::None {
        gnu_demangle::install();
    }
    // Valgrind checks the log file's name before it runs anything.
    let log_file = match s.log_file.as_deref().map(log::file_name).transpose() {
        Ok(name) => name,
        Err(lines) => fail(&lines),
    };
    let valgrind_env = s.valgrind_guest_env();
    let (envp, preload) = match guest_env::build(valgrind_env) {
        Ok(e) => e,
        Err(e) => fail(&[e]),
    };
    let shown = if valgrind_env {
        dbt_core::Presentation::Valgrind
    } else {
        dbt_core::Presentation::Native
    };
    // Bad input is reported before any `==PID==` line, in one line; RunError messages carry
    // the `rgrind: ` prefix already.
    let guest = dbt_core::loader::resolve_program(&s.program, &s.program_args)
        .map_err(dbt_core::RunError::from)
        .and_then(|program| dbt_core::load(program, envp, shown));
    let guest = match guest {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    dbt_core::tool::set_client_output(log::client_text);
    dbt_core::tool::set_source_locator(tools::cachegrind::modules::source_location);
    tools::cachegrind::modules::set_stack_trace_options(s.num_callers, s.show_below_main);
    dbt_core::tool::set_backtrace_printer(tools::cachegrind::modules::print_backtrace);
    if let Err(e) = log::open(log_file.as_deref()) {
        fail(&[format!(
            "cannot open log file '{}': {e}",
            log_file.clone().unwrap_or_default()
        )]);
    }
    let mut startup = Vec::new();
    let (banner, tool): ([&str; 2], Box<dyn dbt_core::tool::Tool>) = match s.tool {
        ToolName::None => (
            tools::none::NoneTool::BANNER,
            Box::new(tools::none::NoneTool { quiet: s.quiet }),
        ),
        ToolName::Cachegrind => {
            let mut cmd = s.program.to_string_lossy().into_owned();
            for a in &s.program_args {
                cmd.push(' ');
                cmd.push_str(&a.to_string_lossy());
            }
            match tools::cachegrind::Cachegrind::new(&s.tool_options, s.quiet, cmd) {
                Ok((t, lines)) => {
                    startup = lines;
                    (tools::cachegrind::Cachegrind::BANNER, Box::new(t))
                }
                Err(lines) => fail(&lines),
            }
        }
        ToolName::Callgrind => {
            let exe = s.program.to_string_lossy().into_owned();
            let args = s
                .program_args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            match tools::callgrind::Callgrind::new(&s.tool_options, s.quiet, exe, args) {
                Ok((t, lines)) => {
                    // Cache warnings (`--PID--`) and the interactive-control line (clgsim).
                    startup = lines;
                    (tools::callgrind::Callgrind::BANNER, Box::new(t))
                }
                Err(lines) => fail(&lines),
            }
        }
    };
    if !s.quiet {
        log::line(banner[0]);
        log::line(banner[1]);
        log::line(&format!(
            "Using rgrind-{VERSION} (Valgrind-3.19.0 compatible); rerun with -h for copyright info"
        ));
        let mut cmd = s.program.to_string_lossy().into_owned();
        for a in &s.program_args {
            cmd.push(' ');
            cmd.push_str(&a.to_string_lossy());
        }
        log::line(&format!("Command: {cmd}"));
        log::line("");
    }
    if valgrind_env && dbt_core::cpu::model() != dbt_core::cpu::CpuModel::Valgrind {
        startup.push(tools::cachegrind::StartupLine::Debug(
            "warning: this CPU cannot run everything Valgrind's canned CPU claims (AVX2, BMI2, \
             FMA, MOVBE...): the program sees the host's CPUID, so start-up counts may differ \
             from Valgrind's"
                .to_string(),
        ));
    }
    for l in startup {
        match l {
            tools::cachegrind::StartupLine::Debug(t) => log::dline(&t),
            // -q keeps warnings (as Valgrind does) and drops the rest.
            tools::cachegrind::StartupLine::User(t) if !s.quiet => log::line(&t),
            tools::cachegrind::StartupLine::User(_) => {}
            tools::cachegrind::StartupLine::Notice(t) => log::line(&t),
        }
    }
    let opts = dbt_core::CoreOptions {
        trace_blocks: s.trace_blocks,
        trace_syscalls: s.trace_syscalls,
        single_step: s.single_step,
        chaining: s.chaining,
        stats: s.stats,
        serialise_threads: s.fair_sched || s.tool != ToolName::None,
        trace_children: dbt_core::children::ChildTracing {
            trace: s.trace_children,
            skip: s.trace_children_skip.clone(),
            skip_by_arg: s.trace_children_skip_by_arg.clone(),
        },
        preload,
        rgrind_args: s.raw_options.clone(),
        ..Default::default()
    };
    match dbt_core::start(guest, opts, tool) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
