//! The Valgrind-style command line: one table of options, parsed once into typed settings.
//!
//! Options come first; the first argument that is not an option starts the program and its
//! arguments. Every message is Valgrind's text with rgrind's name.
use std::ffi::OsString;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolName {
    None,
    Cachegrind,
    Callgrind,
}

#[derive(Debug)]
pub struct Settings {
    pub tool: ToolName,
    pub quiet: bool,
    pub verbose: bool,
    pub log_file: Option<String>,
    pub trace_children: bool,
    /// `--trace-children-skip` and `--trace-children-skip-by-arg`: comma-separated patterns.
    pub trace_children_skip: String,
    pub trace_children_skip_by_arg: String,
    pub trace_blocks: bool,
    pub trace_syscalls: bool,
    pub single_step: bool,
    pub chaining: bool,
    pub stats: bool,
    pub fair_sched: bool,
    /// Frames of a stack trace (`--num-callers`, 1..=500).
    pub num_callers: usize,
    pub show_below_main: bool,
    /// `--guest-env`: `Some(true)` = Valgrind's, `Some(false)` = native, `None` = the tool's
    /// default (see [`Settings::valgrind_guest_env`]).
    pub guest_env: Option<bool>,
    /// Tool options (`--name`, value), checked by the tool once it is chosen.
    pub tool_options: Vec<(String, String)>,
    /// The options exactly as given, to run rgrind again on exec'd programs.
    pub raw_options: Vec<OsString>,
    pub program: OsString,
    pub program_args: Vec<OsString>,
}

impl Settings {
    /// Whether the guest is shown what Valgrind shows (default: with the profiling tools,
    /// whose counts must match Valgrind's).
    pub fn valgrind_guest_env(&self) -> bool {
        self.guest_env.unwrap_or(self.tool != ToolName::None)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Run(Settings),
    /// With the tool named before `--help`, if any.
    Help(Option<String>),
    Version,
}

#[derive(Debug, PartialEq, Eq)]
pub enum CliError {
    Unknown(String),
    BadBool(String, String),
    BadValue(String, String),
    NoProgram,
}

impl CliError {
    /// The lines Valgrind prints for this error.
    pub fn lines(&self) -> Vec<String> {
        match self {
            CliError::Unknown(o) => vec![
                format!("Unknown option: {o}"),
                "Use --help for more information or consult the user manual.".into(),
            ],
            CliError::BadBool(o, v) => vec![
                format!("Bad option: {o}"),
                format!("Invalid boolean value '{v}' (should be 'yes' or 'no')"),
                "Use --help for more information or consult the user manual.".into(),
            ],
            CliError::BadValue(o, why) => vec![
                format!("Bad option: {o}"),
                why.clone(),
                "Use --help for more information or consult the user manual.".into(),
            ],
            CliError::NoProgram => vec![
                "no program specified".into(),
                "Use --help for more information.".into(),
            ],
        }
    }
}

/// Kinds of option values.
#[derive(Clone, Copy)]
enum Kind {
    /// `-q`-style flag without a value.
    Flag,
    /// `--name=yes|no`.
    Bool,
    /// `--name=<string>`.
    Str,
}

/// One row of the option table: name, kind, default shown in --help, help text.
struct Opt {
    name: &'static str,
    kind: Kind,
    help: &'static str,
}

const OPTIONS: &[Opt] = &[
    Opt {
        name: "--tool",
        kind: Kind::Str,
        help: "use the tool named <name>: none, cachegrind, callgrind",
    },
    Opt {
        name: "-q",
        kind: Kind::Flag,
        help: "run silently; only print error messages",
    },
    Opt {
        name: "--quiet",
        kind: Kind::Flag,
        help: "same as -q",
    },
    Opt {
        name: "-v",
        kind: Kind::Flag,
        help: "be more verbose",
    },
    Opt {
        name: "--verbose",
        kind: Kind::Flag,
        help: "same as -v",
    },
    Opt {
        name: "--log-file",
        kind: Kind::Str,
        help: "log messages to <file> (%p and %q{VAR} expand)",
    },
    Opt {
        name: "--trace-children",
        kind: Kind::Bool,
        help: "run exec'd programs under rgrind too [no]",
    },
    Opt {
        name: "--trace-children-skip",
        kind: Kind::Str,
        help: "patt1,patt2,...: with --trace-children=yes, exec'd programs whose path matches one of the patterns (* and ? wildcards) run natively",
    },
    Opt {
        name: "--trace-children-skip-by-arg",
        kind: Kind::Str,
        help: "patt1,patt2,...: the same, matched against each argument of the exec'd program",
    },
    Opt {
        name: "--read-inline-info",
        kind: Kind::Bool,
        help: "accepted as Valgrind does; Cachegrind's and Callgrind's files do not depend on it [no]",
    },
    Opt {
        name: "--num-callers",
        kind: Kind::Str,
        help: "show <number> callers in stack traces (VALGRIND_PRINTF_BACKTRACE) [12]",
    },
    Opt {
        name: "--show-below-main",
        kind: Kind::Bool,
        help: "continue stack traces below main() [no]",
    },
    Opt {
        name: "--trace-blocks",
        kind: Kind::Bool,
        help: "debug: log each translated block (guest range, host address) [no]",
    },
    Opt {
        name: "--trace-syscalls",
        kind: Kind::Bool,
        help: "debug: log each system call and its result [no]",
    },
    Opt {
        name: "--single-step",
        kind: Kind::Bool,
        help: "debug: one guest instruction per block, no chaining [no]",
    },
    Opt {
        name: "--chain",
        kind: Kind::Bool,
        help: "debug: chain direct branches between blocks [yes]",
    },
    Opt {
        name: "--fair-sched",
        kind: Kind::Str,
        help: "no|yes|try: run one guest thread at a time, in FIFO order (always so with cachegrind/callgrind) [no]",
    },
    Opt {
        name: "--error-exitcode",
        kind: Kind::Str,
        help: "exit code to return if errors were found [0=disable]; cachegrind and callgrind report none, as under Valgrind",
    },
    Opt {
        name: "--vgdb",
        kind: Kind::Str,
        help: "no|yes: rgrind has no gdbserver, so both mean no (full is refused) [yes]",
    },
    Opt {
        name: "--guest-env",
        kind: Kind::Str,
        help: "valgrind|native: show the program the machine Valgrind shows (its CPUID, auxv, preload object and the Debian wrapper's variables) or the host as it is [valgrind for cachegrind/callgrind, native for none]",
    },
    Opt {
        name: "--stats",
        kind: Kind::Bool,
        help: "debug: print translation and dispatcher statistics at exit [no]",
    },
];

/// `--help`: the core options, then those of `tool` (Valgrind's layout).
pub fn usage(tool: Option<&str>) -> String {
    let mut s = String::from(
        "usage: rgrind [options] prog-and-args\n       rgrind annotate|diff|merge ...\n\n  options:\n    -h --help                 show this message\n    --version                 show version\n",
    );
    for o in OPTIONS {
        let form = match o.kind {
            Kind::Flag => o.name.to_string(),
            Kind::Bool => format!("{}=no|yes", o.name),
            Kind::Str => format!("{}=<value>", o.name),
        };
        s.push_str(&format!("    {form:<26}{}\n", o.help));
    }
    let tool_help = match tool {
        Some("cachegrind") => Some(crate::tools::cachegrind::options::HELP),
        Some("callgrind") => Some(crate::tools::callgrind::options::HELP),
        _ => None,
    };
    if let Some(help) = tool_help {
        s.push('\n');
        s.push_str(help);
    }
    s.push_str(
        "\n  Options are also read, before these, from ~/.valgrindrc, $VALGRIND_OPTS and\n  \
         ./.valgrindrc; --<tool>:<option> applies to that tool only.\n",
    );
    s
}

/// Option `arg` as it applies to tool `tool`: `--<tool>:rest` becomes `--rest`; `None` when
/// it is prefixed with another tool's name (Valgrind skips those). A colon after the `=`
/// belongs to the value.
fn for_tool(arg: &str, tool: &str) -> Option<String> {
    let name_end = arg.find(['=', ':']).unwrap_or(arg.len());
    if !arg[name_end..].starts_with(':') {
        return Some(arg.to_string());
    }
    let prefix = arg.get(2..name_end).unwrap_or("");
    (arg.starts_with("--") && prefix == tool).then(|| format!("--{}", &arg[name_end + 1..]))
}

/// Valgrind's option sources before the command line, in its order: `$HOME/.valgrindrc`,
/// `$VALGRIND_OPTS`, `./.valgrindrc` (not when `.` is `$HOME`), each split at blanks with
/// `'` and `"` quoting. An rc file not owned by the user or writable by all is not read
/// (Valgrind's CVE-2008-4865 rule), with a warning.
pub fn default_options() -> (Vec<OsString>, Vec<String>) {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    let home = std::env::var_os("HOME");
    let mut rc = |dir: &std::path::Path, out: &mut Vec<OsString>| {
        let path = dir.join(".valgrindrc");
        let Ok(meta) = std::fs::metadata(&path) else {
            return;
        };
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if meta.uid() != euid || meta.mode() & 0o002 != 0 {
            warnings.push(format!(
                "{} was not read as it is either world writeable or not owned by the current user",
                path.display()
            ));
            return;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.extend(split_options(&text));
        }
    };
    if let Some(h) = &home {
        rc(std::path::Path::new(h), &mut out);
    }
    if let Some(env) = std::env::var_os("VALGRIND_OPTS") {
        out.extend(split_options(&env.to_string_lossy()));
    }
    let cwd = std::env::current_dir().ok();
    let same = match (&home, &cwd) {
        (Some(h), Some(c)) => std::fs::canonicalize(h).ok().as_deref() == Some(c.as_path()),
        _ => false,
    };
    if !same {
        rc(std::path::Path::new("."), &mut out);
    }
    (out, warnings)
}

/// Splits option text as Valgrind does: at blanks, `'...'` and `"..."` quoting blanks (the
/// quotes themselves dropped).
fn split_options(text: &str) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    let mut any = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                any = true;
            }
            None if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(OsString::from(std::mem::take(&mut cur)));
                }
                any = false;
            }
            None => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(OsString::from(cur));
    }
    out
}

fn parse_bool(opt: &str, v: &str) -> Result<bool, CliError> {
    match v {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(CliError::BadBool(opt.to_string(), v.to_string())),
    }
}

/// Parses the command line `args` after `defaults`, the options Valgrind reads first
/// (`~/.valgrindrc`, `$VALGRIND_OPTS`, `./.valgrindrc`: [`default_options`]). As in
/// Valgrind, the tool comes from the command line only (a `--tool=` among the defaults is
/// ignored), an option written `--<tool>:name=value` applies only when that tool runs, and
/// the defaults are not among [`Settings::raw_options`] (an exec'd child reads them again).
pub fn parse(defaults: &[OsString], args: &[OsString]) -> Result<Command, CliError> {
    let mut s = Settings {
        tool: ToolName::None,
        quiet: false,
        verbose: false,
        log_file: None,
        trace_children: false,
        trace_children_skip: String::new(),
        trace_children_skip_by_arg: String::new(),
        trace_blocks: false,
        trace_syscalls: false,
        single_step: false,
        chaining: true,
        stats: false,
        fair_sched: false,
        num_callers: 12,
        show_below_main: false,
        guest_env: None,
        tool_options: Vec::new(),
        raw_options: Vec::new(),
        program: OsString::new(),
        program_args: Vec::new(),
    };
    let mut tool_given = None;
    // The command line's options end at the program.
    let i = args
        .iter()
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .unwrap_or(args.len());
    let tool_name = args[..i]
        .iter()
        .filter_map(|a| a.to_str()?.strip_prefix("--tool="))
        .next_back()
        .unwrap_or("none")
        .to_string();
    let all = defaults
        .iter()
        .map(|a| (a, false))
        .chain(args[..i].iter().map(|a| (a, true)));
    for (raw, on_command_line) in all {
        let given = raw.to_string_lossy().into_owned();
        if !given.starts_with('-') {
            return Err(CliError::Unknown(given));
        }
        let keep = |s: &mut Settings| {
            if on_command_line {
                s.raw_options.push(raw.clone());
            }
        };
        let Some(arg) = for_tool(&given, &tool_name) else {
            // Another tool's: skipped here, passed on to exec'd children as Valgrind does.
            keep(&mut s);
            continue;
        };
        if !on_command_line && arg.starts_with("--tool=") {
            continue;
        }
        match arg.as_str() {
            "-h" | "--help" | "--help-debug" => return Ok(Command::Help(tool_given.clone())),
            "--version" => return Ok(Command::Version),
            _ => {}
        }
        let (name, value) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (arg.as_str(), None),
        };
        let Some(opt) = OPTIONS.iter().find(|o| o.name == name) else {
            if let (true, Some(v)) = (crate::tools::is_tool_option(name), value) {
                s.tool_options.push((name.to_string(), v.to_string()));
                keep(&mut s);
                continue;
            }
            return Err(CliError::Unknown(arg.clone()));
        };
        let flag_ok = matches!(opt.kind, Kind::Flag) == value.is_none();
        if !flag_ok {
            return Err(CliError::Unknown(arg.clone()));
        }
        let v = value.unwrap_or("");
        match name {
            "--tool" => tool_given = Some(v.to_string()),
            "-q" | "--quiet" => s.quiet = true,
            "-v" | "--verbose" => s.verbose = true,
            "--log-file" => s.log_file = Some(v.to_string()),
            "--trace-children" => s.trace_children = parse_bool(&arg, v)?,
            "--trace-children-skip" => s.trace_children_skip = v.to_string(),
            "--trace-children-skip-by-arg" => s.trace_children_skip_by_arg = v.to_string(),
            "--read-inline-info" => {
                parse_bool(&arg, v)?;
            }
            "--num-callers" => {
                let n: i64 = v.parse().map_err(|_| {
                    CliError::BadValue(arg.clone(), format!("Invalid integer value '{v}'"))
                })?;
                if !(1..=500).contains(&n) {
                    return Err(CliError::BadValue(
                        arg.clone(),
                        "'--num-callers' argument must be between 1 and 500".into(),
                    ));
                }
                s.num_callers = n as usize;
            }
            "--show-below-main" => s.show_below_main = parse_bool(&arg, v)?,
            "--trace-blocks" => s.trace_blocks = parse_bool(&arg, v)?,
            "--trace-syscalls" => s.trace_syscalls = parse_bool(&arg, v)?,
            "--single-step" => s.single_step = parse_bool(&arg, v)?,
            "--chain" => s.chaining = parse_bool(&arg, v)?,
            "--stats" => s.stats = parse_bool(&arg, v)?,
            "--fair-sched" => {
                s.fair_sched = match v {
                    "yes" | "try" => true,
                    "no" => false,
                    _ => {
                        return Err(CliError::BadValue(
                            arg.clone(),
                            format!(
                        "Invalid argument '{v}' for --fair-sched (should be 'no', 'yes' or 'try')"
                    ),
                        ))
                    }
                }
            }
            "--error-exitcode" => {
                // Valgrind's integer parse: an optional sign and digits (empty is 0). No
                // tool here reports errors, so the code is never used, as under Valgrind.
                let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
                if !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CliError::BadValue(
                        arg.clone(),
                        format!("Invalid integer value '{v}'"),
                    ));
                }
            }
            "--vgdb" => match v {
                "no" | "yes" => {}
                "full" => {
                    return Err(CliError::BadValue(
                        arg.clone(),
                        "--vgdb=full is not implemented in rgrind (it has no gdbserver)".into(),
                    ))
                }
                _ => return Err(CliError::Unknown(arg.clone())),
            },
            "--guest-env" => {
                s.guest_env = Some(match v {
                    "valgrind" => true,
                    "native" => false,
                    _ => {
                        return Err(CliError::BadValue(
                            arg.clone(),
                            format!(
                        "Invalid argument '{v}' for --guest-env (should be 'valgrind' or 'native')"
                    ),
                        ))
                    }
                })
            }
            _ => return Err(CliError::Unknown(arg.clone())),
        }
        keep(&mut s);
    }
    s.tool = match tool_given.as_deref() {
        None | Some("none") => ToolName::None,
        Some("cachegrind") => ToolName::Cachegrind,
        Some("callgrind") => ToolName::Callgrind,
        Some(other) => {
            return Err(CliError::BadValue(
                format!("--tool={other}"),
                format!("tool '{other}' is not available in rgrind (available: none, cachegrind, callgrind)"),
            ))
        }
    };
    for (n, v) in &s.tool_options {
        if !crate::tools::tool_accepts(s.tool, n) {
            return Err(CliError::Unknown(format!("{n}={v}")));
        }
    }
    if i >= args.len() {
        return Err(CliError::NoProgram);
    }
    s.program = args[i].clone();
    s.program_args = args[i + 1..].to_vec();
    Ok(Command::Run(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str], expect: Result<(), CliError>) -> Option<Settings> {
        let a: Vec<OsString> = args.iter().map(OsString::from).collect();
        match (parse(&[], &a), expect) {
            (Ok(Command::Run(s)), Ok(())) => Some(s),
            (Err(e), Err(want)) => {
                assert_eq!(e, want);
                None
            }
            (got, want) => panic!("{args:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn options_stop_at_program() {
        let s = check(&["--tool=none", "-q", "ls", "-l", "--tool=x"], Ok(())).unwrap();
        assert_eq!(s.tool, ToolName::None);
        assert!(s.quiet);
        assert_eq!(s.program, "ls");
        assert_eq!(
            s.program_args,
            vec![OsString::from("-l"), OsString::from("--tool=x")]
        );
    }

    #[test]
    fn harness_core_options_are_accepted_as_valgrind_does() {
        // gungraun's and CodSpeed's first options.
        let line = [
            "--tool=callgrind",
            "--error-exitcode=0",
            "--trace-children=yes",
            "--fair-sched=try",
            "--vgdb=no",
            "ls",
        ];
        let s = check(&line, Ok(())).unwrap();
        assert_eq!(s.tool, ToolName::Callgrind);
        assert!(s.trace_children && s.fair_sched);
        for ok in ["--error-exitcode=-1", "--error-exitcode=", "--vgdb=yes"] {
            check(&[ok, "ls"], Ok(()));
        }
        check(
            &["--error-exitcode=abc", "ls"],
            Err(CliError::BadValue(
                "--error-exitcode=abc".into(),
                "Invalid integer value 'abc'".into(),
            )),
        );
        check(
            &["--vgdb=maybe", "ls"],
            Err(CliError::Unknown("--vgdb=maybe".into())),
        );
        assert!(matches!(
            parse(&[], &[OsString::from("--vgdb=full"), OsString::from("ls")]),
            Err(CliError::BadValue(..))
        ));
    }

    #[test]
    fn defaults_come_first_and_tool_prefixes_select() {
        let d = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let run = |defaults: &[&str], args: &[&str]| match parse(&d(defaults), &d(args)) {
            Ok(Command::Run(s)) => s,
            other => panic!("{defaults:?} {args:?}: {other:?}"),
        };
        // A default is overridden by the command line and not passed on to children.
        let s = run(
            &["--trace-children=yes", "-q"],
            &["--trace-children=no", "ls"],
        );
        assert!(!s.trace_children && s.quiet);
        assert_eq!(s.raw_options, d(&["--trace-children=no"]));
        // `--<tool>:` applies to the running tool only; the tool comes from the command line.
        let s = run(
            &[
                "--callgrind:dump-instr=yes",
                "--cachegrind:cache-sim=yes",
                "--tool=cachegrind",
            ],
            &["--tool=callgrind", "--none:trace-blocks=yes", "ls"],
        );
        assert_eq!(s.tool, ToolName::Callgrind);
        assert_eq!(
            s.tool_options,
            vec![("--dump-instr".to_string(), "yes".to_string())]
        );
        assert!(!s.trace_blocks);
        assert_eq!(
            s.raw_options,
            d(&["--tool=callgrind", "--none:trace-blocks=yes"])
        );
        // A colon in the value is no prefix.
        let s = run(&[], &["--log-file=a:b", "ls"]);
        assert_eq!(s.log_file.as_deref(), Some("a:b"));
        assert!(matches!(
            parse(&d(&["ls"]), &d(&["ls"])),
            Err(CliError::Unknown(a)) if a == "ls"
        ));
    }

    #[test]
    fn option_text_splits_at_blanks_with_quotes() {
        assert_eq!(
            split_options(" -q\t'--log-file=a b'  \"--x=\" --y=''\n"),
            vec![
                OsString::from("-q"),
                OsString::from("--log-file=a b"),
                OsString::from("--x="),
                OsString::from("--y="),
            ]
        );
        assert!(split_options(" \n ").is_empty());
    }

    #[test]
    fn errors_name_the_option() {
        check(
            &["--foo=bar", "ls"],
            Err(CliError::Unknown("--foo=bar".into())),
        );
        check(
            &["--trace-children=maybe", "ls"],
            Err(CliError::BadBool(
                "--trace-children=maybe".into(),
                "maybe".into(),
            )),
        );
        check(&["-q"], Err(CliError::NoProgram));
        assert_eq!(
            CliError::Unknown("--foo".into()).lines()[0],
            "Unknown option: --foo"
        );
    }
}
