//! `rgrind-bench`: times CPU-bound programs natively, under rgrind and under Valgrind in the same
//! run and prints the wall-clock ratios.
//!
//! ```text
//! cargo run --release -p rgrind-benches -- [--tool none|cachegrind|callgrind] [--opts "..."]
//!     [--set cpu|startup] [--only a,b] [-n N] [--rgrind PATH] [--valgrind PATH]
//! ```
//!
//! # Invariants
//! - Each case runs native, rgrind, valgrind in turn, N rounds, interleaved, so drift on a busy
//!   machine hits all three alike; the reported time is the best of the N. Native and rgrind
//!   run once more before the rounds, untimed, so that no row pays for a cold start (rgrind's
//!   symbol cache, its own pages); Valgrind has no such cache and runs long enough not to
//!   need it.
//! - Profile files (`--tool=cachegrind|callgrind`) go to a temporary folder that is removed at the
//!   end; guests run with stdin, stdout and stderr on `/dev/null`.
//!
//! It deliberately is not a test and asserts nothing about speed: wall-clock numbers are for
//! people. It does not check output either (the integration tests in `tests/` do that); a
//! non-zero exit status is reported next to the times.

mod guests;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::Instant;

const USAGE: &str = "usage: rgrind-bench [--tool none|cachegrind|callgrind] [--opts \"OPTS\"]... [--set cpu|startup]
                    [--only a,b] [-n N] [--rgrind PATH] [--valgrind PATH]
  --tool      tool for rgrind and valgrind (default none)
  --opts      extra options for both, split on whitespace (repeatable)
  --set       cpu: CPU-bound guests and python3/sqlite3 workloads (default); startup: short
              runs, what a benchmark harness pays per run (a C hello, python3 start-up and
              imports, this Rust program's --help), the last also with an empty environment
              as gungraun runs its tool
  --only      comma-separated case names (default: all)
  -n          rounds per case; the best time is reported (default 3)
  --rgrind    rgrind binary (default: $RGRIND, else <workspace>/target/release/rgrind)
  --valgrind  valgrind binary (default: valgrind from PATH; its column is empty without one)";

/// Everything that can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
enum BenchError {
    /// Bad input: the command line.
    #[error("{0}\n{USAGE}")]
    Usage(String),
    /// Bad setup: no rgrind binary.
    #[error("build rgrind first: cargo build --release (no executable at {0})")]
    NoRgrind(PathBuf),
    /// Bad setup: a guest could not be built.
    #[error(transparent)]
    Build(#[from] guests::BuildError),
    /// A program could not be started at all.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The tools rgrind and Valgrind both have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    None,
    Cachegrind,
    Callgrind,
}

impl Tool {
    fn parse(s: &str) -> Result<Tool, BenchError> {
        match s {
            "none" => Ok(Tool::None),
            "cachegrind" => Ok(Tool::Cachegrind),
            "callgrind" => Ok(Tool::Callgrind),
            _ => Err(BenchError::Usage(format!("unknown tool {s:?}"))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tool::None => "none",
            Tool::Cachegrind => "cachegrind",
            Tool::Callgrind => "callgrind",
        }
    }

    /// The option that names the profile file, for tools that write one.
    fn out_file_option(self) -> Option<&'static str> {
        match self {
            Tool::None => None,
            Tool::Cachegrind => Some("--cachegrind-out-file"),
            Tool::Callgrind => Some("--callgrind-out-file"),
        }
    }
}

/// Parsed command line.
#[derive(Debug)]
struct Options {
    tool: Tool,
    opts: Vec<String>,
    set: CaseSet,
    only: Option<Vec<String>>,
    rounds: usize,
    rgrind: Option<PathBuf>,
    valgrind: Option<PathBuf>,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Options, BenchError> {
    let mut o = Options {
        tool: Tool::None,
        opts: Vec::new(),
        set: CaseSet::Cpu,
        only: None,
        rounds: 3,
        rgrind: None,
        valgrind: None,
        help: false,
    };
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_owned())),
            _ => (arg, None),
        };
        let mut value = || -> Result<String, BenchError> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| BenchError::Usage(format!("{key} needs a value")))
        };
        match key {
            "--tool" => o.tool = Tool::parse(&value()?)?,
            "--set" => {
                o.set = match value()?.as_str() {
                    "cpu" => CaseSet::Cpu,
                    "startup" => CaseSet::Startup,
                    v => return Err(BenchError::Usage(format!("unknown case set {v:?}"))),
                }
            }
            "--opts" => o
                .opts
                .extend(value()?.split_whitespace().map(str::to_owned)),
            "--only" => {
                o.only = Some(
                    value()?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                )
            }
            "-n" => {
                let v = value()?;
                o.rounds = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    BenchError::Usage(format!("-n wants a positive number, not {v:?}"))
                })?;
            }
            "--rgrind" => o.rgrind = Some(value()?.into()),
            "--valgrind" => o.valgrind = Some(value()?.into()),
            "-h" | "--help" => o.help = true,
            _ => return Err(BenchError::Usage(format!("unknown argument {arg:?}"))),
        }
        i += 1;
    }
    Ok(o)
}

/// Which cases a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaseSet {
    Cpu,
    Startup,
}

/// One benchmark: a name and the command line (program first), run with an empty
/// environment when `clear_env` (as gungraun runs its tool).
struct Case {
    name: &'static str,
    argv: Vec<String>,
    clear_env: bool,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn cases(build_dir: &Path, set: CaseSet) -> Result<Vec<Case>, BenchError> {
    let exe = |name: &str| -> Result<String, BenchError> {
        let g = guests::GUESTS
            .iter()
            .find(|g| g.name == name)
            .ok_or_else(|| BenchError::Usage(format!("no guest {name}")))?;
        Ok(guests::build(build_dir, g)?.display().to_string())
    };
    let case = |name: &'static str, argv: Vec<String>| Case {
        name,
        argv,
        clear_env: false,
    };
    let python = Path::new("/usr/bin/python3").is_file();
    if !python {
        println!("(no /usr/bin/python3: skipping the python cases)");
    }
    let python_case = |name: &'static str, code: &str| {
        case(
            name,
            vec!["/usr/bin/python3".into(), "-c".into(), code.into()],
        )
    };
    let mut v = Vec::new();
    if set == CaseSet::Startup {
        v.push(case("hello", vec![exe("hello")?]));
        if python {
            v.push(python_case("py-pass", "pass"));
            v.push(python_case("py-import", "import json, decimal, sqlite3"));
        }
        let me = std::env::current_exe()
            .map_err(|source| BenchError::Spawn {
                program: "rgrind-bench".into(),
                source,
            })?
            .display()
            .to_string();
        v.push(case("rust", vec![me.clone(), "--help".into()]));
        v.push(Case {
            name: "rust-noenv",
            argv: vec![me, "--help".into()],
            clear_env: true,
        });
        return Ok(v);
    }
    v.extend([
        case("matmul", vec![exe("matmul")?, "400".into(), "32".into()]),
        case(
            "stride",
            vec![exe("stride")?, "67108864".into(), "64".into(), "8".into()],
        ),
        case(
            "chase",
            vec![exe("chase")?, "67108864".into(), "2000000".into()],
        ),
        case("calls", vec![exe("calls")?, "38".into()]),
    ]);
    if python {
        v.push(python_case(
            "python",
            "print(sum(i*i for i in range(3000000)))",
        ));
    }
    if let Some(sqlite) = find_in_path("sqlite3") {
        v.push(case(
            "sqlite",
            vec![
                sqlite.display().to_string(),
                ":memory:".into(),
                "create table t(a,b); with recursive c(x) as (select 1 union all select x+1 from c where x<300000) \
                 insert into t select x, x*x from c; select count(*), sum(b) from t where a % 7 = 3;"
                    .into(),
            ],
        ));
    } else {
        println!("(no sqlite3: skipping the sqlite case)");
    }
    // The last two workloads of ../shared/cases/perf.cases.
    let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    match find_in_path("bzip2") {
        Some(bzip2) if Path::new(libc).exists() => v.push(case(
            "bzip2",
            vec![
                bzip2.display().to_string(),
                "-c".into(),
                "-9".into(),
                libc.into(),
            ],
        )),
        _ => println!("(no bzip2 or {libc}: skipping the bzip2 case)"),
    }
    if let Some(perl) = find_in_path("perl") {
        v.push(case(
            "perl",
            vec![
                perl.display().to_string(),
                "-e".into(),
                "my %h; $h{$_ % 1000} += $_ for 1..2000000; print scalar(keys %h), qq(\n);".into(),
            ],
        ));
    } else {
        println!("(no perl: skipping the perl case)");
    }
    Ok(v)
}

/// Runs a command with all of stdio on /dev/null (and no environment with `clear_env`);
/// returns the wall time and the status.
fn timed(argv: &[String], clear_env: bool) -> Result<(f64, ExitStatus), BenchError> {
    let mut command = Command::new(&argv[0]);
    if clear_env {
        command.env_clear();
    }
    let start = Instant::now();
    let status = command
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|source| BenchError::Spawn {
            program: argv[0].clone(),
            source,
        })?;
    Ok((start.elapsed().as_secs_f64(), status))
}

fn launcher_argv(
    launcher: &Path,
    tool: Tool,
    opts: &[String],
    out: &Path,
    guest: &[String],
) -> Vec<String> {
    let mut v = vec![
        launcher.display().to_string(),
        format!("--tool={}", tool.name()),
    ];
    v.extend(opts.iter().cloned());
    if let Some(opt) = tool.out_file_option() {
        v.push(format!("{opt}={}", out.display()));
    }
    v.extend(guest.iter().cloned());
    v
}

/// Best time of each column and the first failing status, if any.
struct Row {
    best: [Option<f64>; 3],
    failed: [Option<ExitStatus>; 3],
}

fn measure(
    case: &Case,
    o: &Options,
    rgrind: &Path,
    valgrind: Option<&Path>,
    tmp: &Path,
) -> Result<Row, BenchError> {
    let mut commands = vec![
        Some(case.argv.clone()),
        Some(launcher_argv(
            rgrind,
            o.tool,
            &o.opts,
            &tmp.join("rg.out"),
            &case.argv,
        )),
    ];
    commands.push(
        valgrind.map(|vg| launcher_argv(vg, o.tool, &o.opts, &tmp.join("vg.out"), &case.argv)),
    );
    let mut row = Row {
        best: [None; 3],
        failed: [None; 3],
    };
    // Untimed: the first run of a program under rgrind fills its symbol cache, and the first
    // case of a run also pays for rgrind's own pages (matmul once measured 12.2x against
    // 18.3x in the next run).
    for cmd in commands.iter().take(2).flatten() {
        timed(cmd, case.clear_env)?;
    }
    for _ in 0..o.rounds {
        for (col, cmd) in commands.iter().enumerate() {
            let Some(cmd) = cmd else { continue };
            let (t, status) = timed(cmd, case.clear_env)?;
            row.best[col] = Some(row.best[col].map_or(t, |b: f64| b.min(t)));
            if !status.success() && row.failed[col].is_none() {
                row.failed[col] = Some(status);
            }
        }
    }
    Ok(row)
}

fn fmt_time(t: Option<f64>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| format!("{t:.3}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
}

fn geomean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        None
    } else {
        Some((xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp())
    }
}

fn run(o: &Options) -> Result<(), BenchError> {
    let rgrind = o
        .rgrind
        .clone()
        .or_else(|| std::env::var_os("RGRIND").map(PathBuf::from))
        .unwrap_or_else(|| workspace_root().join("target/release/rgrind"));
    if !rgrind.is_file() {
        return Err(BenchError::NoRgrind(rgrind));
    }
    let valgrind = o.valgrind.clone().or_else(|| find_in_path("valgrind"));
    if valgrind.is_none() {
        println!("(valgrind not found: its columns stay empty)");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let mut all = cases(&target.join("rgrind-bench-guests"), o.set)?;
    if let Some(only) = &o.only {
        if let Some(bad) = only
            .iter()
            .find(|n| !all.iter().any(|c| c.name == n.as_str()))
        {
            let names: Vec<&str> = all.iter().map(|c| c.name).collect();
            return Err(BenchError::Usage(format!(
                "unknown case {bad:?} (cases: {})",
                names.join(",")
            )));
        }
        all.retain(|c| only.iter().any(|n| n == c.name));
    }
    let tmp = std::env::temp_dir().join(format!("rgrind-bench.{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|source| BenchError::Spawn {
        program: tmp.display().to_string(),
        source,
    })?;

    println!(
        "tool={} opts={:?} best of {} (wall clock, seconds)",
        o.tool.name(),
        o.opts,
        o.rounds
    );
    println!(
        "{:<10} {:>9} {:>9} {:>10} {:>13} {:>15} {:>15}",
        "program",
        "native s",
        "rgrind s",
        "valgrind s",
        "rgrind/native",
        "valgrind/native",
        "valgrind/rgrind"
    );
    let (mut g_rn, mut g_vn, mut g_vr) = (Vec::new(), Vec::new(), Vec::new());
    for case in &all {
        let row = measure(case, o, &rgrind, valgrind.as_deref(), &tmp)?;
        let [n, r, v] = row.best;
        let (rn, vn, vr) = (ratio(r, n), ratio(v, n), ratio(v, r));
        let notes: Vec<String> = ["native", "rgrind", "valgrind"]
            .iter()
            .zip(row.failed)
            .filter_map(|(who, st)| st.map(|st| format!("{who} failed: {st}")))
            .collect();
        println!(
            "{:<10} {:>9} {:>9} {:>10} {:>13} {:>15} {:>15}{}",
            case.name,
            fmt_time(n),
            fmt_time(r),
            fmt_time(v),
            fmt_ratio(rn),
            fmt_ratio(vn),
            fmt_ratio(vr),
            if notes.is_empty() {
                String::new()
            } else {
                format!("  ({})", notes.join(", "))
            }
        );
        if row.failed.iter().all(Option::is_none) {
            g_rn.extend(rn);
            g_vn.extend(vn);
            g_vr.extend(vr);
        }
    }
    println!(
        "geomean over cases without failures: rgrind/native {}, valgrind/native {}, valgrind/rgrind {}",
        fmt_ratio(geomean(&g_rn)),
        fmt_ratio(geomean(&g_vn)),
        fmt_ratio(geomean(&g_vr))
    );
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = parse_args(&args).and_then(|o| {
        if o.help {
            println!("{USAGE}");
            Ok(())
        } else {
            run(&o)
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rgrind-bench: {e}");
            ExitCode::from(if matches!(e, BenchError::Usage(_)) {
                2
            } else {
                1
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, BenchError> {
        parse_args(&args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn parses_both_option_spellings() {
        let o = parse(&[
            "--tool",
            "cachegrind",
            "--opts=--cache-sim=yes --branch-sim=no",
            "--only=a,b",
            "-n",
            "5",
            "--set=startup",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.tool, Tool::Cachegrind);
        assert_eq!(o.set, CaseSet::Startup);
        assert_eq!(o.opts, ["--cache-sim=yes", "--branch-sim=no"]);
        assert_eq!(o.only, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(o.rounds, 5);
        let o = parse(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((o.tool, o.rounds, o.only.is_none()), (Tool::None, 3, true));
        assert_eq!(o.set, CaseSet::Cpu);
    }

    #[test]
    fn rejects_bad_arguments() {
        for bad in [
            &["--tool", "memcheck"][..],
            &["-n", "0"],
            &["-n"],
            &["--frobnicate"],
            &["--set", "gpu"],
        ] {
            assert!(matches!(parse(bad), Err(BenchError::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn ratios_and_geomean() {
        assert_eq!(ratio(Some(4.0), Some(2.0)), Some(2.0));
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        let g = geomean(&[2.0, 8.0]).unwrap_or(0.0);
        assert!((g - 4.0).abs() < 1e-12, "{g}");
        assert_eq!(geomean(&[]), None);
    }
}
