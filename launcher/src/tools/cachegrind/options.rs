//! Cachegrind's options: `--cache-sim`, `--branch-sim`, `--I1/--D1/--LL` (and the old
//! `--L2`), `--cachegrind-out-file`, `--instr-at-start`, checked with Valgrind's messages.
use cachesim::{CacheGeometry, CacheLevel, CacheOverrides};
use dumper::OutFileTemplate;

/// The `--help` section of this tool's options (Valgrind's, with rgrind's defaults).
pub const HELP: &str = "  user options for Cachegrind:
    --I1=<size>,<assoc>,<line_size>  set I1 cache manually
    --D1=<size>,<assoc>,<line_size>  set D1 cache manually
    --LL=<size>,<assoc>,<line_size>  set LL cache manually
    --cache-sim=yes|no               collect cache stats? [no]
    --branch-sim=yes|no              collect branch prediction stats? [no]
    --cachegrind-out-file=<file>     output file name [cachegrind.out.%p]
    --instr-at-start=yes|no          instrument from the start? [yes]
";

/// Option names this tool accepts.
pub const OPTION_NAMES: &[&str] = &[
    "--cache-sim",
    "--branch-sim",
    "--I1",
    "--D1",
    "--LL",
    "--L2",
    "--cachegrind-out-file",
    "--instr-at-start",
];

#[derive(Debug)]
pub struct CgOptions {
    pub cache_sim: bool,
    pub branch_sim: bool,
    pub caches: CacheOverrides,
    pub out_file: OutFileTemplate,
    pub instr_at_start: bool,
}

/// A bad option: the lines to print after `rgrind: ` (Valgrind's text).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct OptionError(pub Vec<String>);

fn parse_bool(name: &str, v: &str) -> Result<bool, OptionError> {
    match v {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(OptionError(vec![
            format!("Bad option: {name}={v}"),
            format!("Invalid boolean value '{v}' (should be 'yes' or 'no')"),
            "Use --help for more information or consult the user manual.".into(),
        ])),
    }
}

/// Parses the tool options in command-line order (a later one wins).
pub fn parse(opts: &[(String, String)]) -> Result<CgOptions, OptionError> {
    let mut o = CgOptions {
        cache_sim: false,
        branch_sim: false,
        caches: CacheOverrides::default(),
        out_file: OutFileTemplate::parse("cachegrind.out.%p")
            .map_err(|e| OptionError(vec![e.to_string()]))?,
        instr_at_start: true,
    };
    for (name, v) in opts {
        match name.as_str() {
            "--cache-sim" => o.cache_sim = parse_bool(name, v)?,
            "--branch-sim" => o.branch_sim = parse_bool(name, v)?,
            "--instr-at-start" => o.instr_at_start = parse_bool(name, v)?,
            "--cachegrind-out-file" => {
                o.out_file = OutFileTemplate::parse(v)
                    .map_err(|e| OptionError(e.valgrind_lines(name, v)))?;
            }
            _ => {
                let arg = format!("{name}={v}");
                let Some((level, value)) = CacheLevel::split_option(&arg) else {
                    return Err(OptionError(vec![format!("Unknown option: {arg}")]));
                };
                let g = CacheGeometry::parse(value).map_err(|e| {
                    let mut lines = e.valgrind_lines(&arg);
                    if !lines.first().is_some_and(|l| l.starts_with("Bad option")) {
                        lines.insert(0, format!("Bad option: {arg}"));
                    }
                    OptionError(lines)
                })?;
                match level {
                    CacheLevel::I1 => o.caches.i1 = Some(g),
                    CacheLevel::D1 => o.caches.d1 = Some(g),
                    CacheLevel::LL => o.caches.ll = Some(g),
                }
            }
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_ir_only() {
        let o = parse(&[]).unwrap();
        assert!(!o.cache_sim && !o.branch_sim && o.instr_at_start);
        assert_eq!(o.out_file.as_str(), "cachegrind.out.%p");
    }

    #[test]
    fn caches_and_bools_parse() {
        let o = parse(&opts(&[
            ("--cache-sim", "yes"),
            ("--I1", "32768,8,64"),
            ("--L2", "8388608,16,64"),
            ("--branch-sim", "yes"),
        ]))
        .unwrap();
        assert!(o.cache_sim && o.branch_sim);
        assert_eq!(o.caches.i1.unwrap().size, 32768);
        assert_eq!(o.caches.ll.unwrap().assoc, 16);
        let e = parse(&opts(&[("--cache-sim", "maybe")])).unwrap_err();
        assert_eq!(e.0[0], "Bad option: --cache-sim=maybe");
        let e = parse(&opts(&[("--LL", "12582912,16,64")])).unwrap_err();
        assert_eq!(e.0[0], "Bad option: --LL=12582912,16,64");
    }
}
