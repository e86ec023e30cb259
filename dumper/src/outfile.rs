//! Output-file name templates (`--cachegrind-out-file`, `--callgrind-out-file`, `--log-file`).
//!
//! Implements Valgrind's `VG_(expand_file_name)`: `%p` is the pid, `%n` a per-pid sequence
//! number, `%q{VAR}` an environment variable, `%%` a literal `%`. Anything else after `%`, a
//! leading `~`, an empty name, a `%q` without `{`, a missing `}` or an unset variable is rejected
//! with Valgrind's message. Also builds Callgrind's part (`.N`) and thread (`-NN`) names.
//!
//! # Invariants
//! * A parsed [`OutFileTemplate`] is syntactically valid; `expand` can only fail on an unset
//!   environment variable.
//!
//! This module deliberately does not read the process environment or cwd itself: the caller
//! passes a lookup function and the startup directory, so expansion is pure.

use std::path::{Path, PathBuf};

/// Opens an output file for writing as Valgrind creates its profiles: created with mode 0600
/// (owner read and write only, before the umask; an existing file keeps its mode), else
/// truncated, or with `append` written at its end.
pub fn create_output(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)
}

/// Why a template was rejected. `Display` gives Valgrind's explanation line(s); use
/// [`TemplateError::valgrind_lines`] for the full `Bad option:` block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// Bad input: the template is empty.
    #[error("No filename given")]
    Empty,
    /// Bad input: the template starts with `~`.
    #[error("Filename begins with '~'\nYou probably expected the shell to expand the '~', but it\ndidn't.  The rules for '~'-expansion vary from shell to shell.\nYou might have more luck using $HOME instead.")]
    Tilde,
    /// Bad input: `%` followed by something other than `p`, `n`, `q` or `%`.
    #[error("Expected 'p' or 'q' or '%' after '%'")]
    BadPercent,
    /// Bad input: `%q` not followed by `{`.
    #[error("Expected '{{' after '%q'")]
    QNoBrace,
    /// Bad input: `%q{` without a closing `}`.
    #[error("Missing '}}' in %q specifier")]
    QNoClose,
    /// Bad input: `%q{VAR}` names an unset variable.
    #[error("Environment variable '{0}' is not set")]
    Unset(String),
}

impl TemplateError {
    /// The lines Valgrind prints (without the `==PID== ` prefix) for `--option=value`.
    pub fn valgrind_lines(&self, option: &str, value: &str) -> Vec<String> {
        let mut v = vec![format!("Bad option: {option}={value}")];
        v.extend(self.to_string().lines().map(str::to_string));
        v.push("Use --help for more information or consult the user manual.".to_string());
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Pid,
    Seq,
    Env(String),
}

/// A checked output-file template such as `callgrind.out.%p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFileTemplate {
    raw: String,
    pieces: Vec<Piece>,
}

impl OutFileTemplate {
    /// Checks `template` the way Valgrind does at option-parsing time.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        if template.is_empty() {
            return Err(TemplateError::Empty);
        }
        if template.starts_with('~') {
            return Err(TemplateError::Tilde);
        }
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                lit.push(c);
                continue;
            }
            match chars.next() {
                Some('%') => lit.push('%'),
                Some(k @ ('p' | 'n')) => {
                    if !lit.is_empty() {
                        pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    }
                    pieces.push(if k == 'p' { Piece::Pid } else { Piece::Seq });
                }
                Some('q') => {
                    if chars.next() != Some('{') {
                        return Err(TemplateError::QNoBrace);
                    }
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            None => return Err(TemplateError::QNoClose),
                            Some('}') => break,
                            Some(ch) => name.push(ch),
                        }
                    }
                    if !lit.is_empty() {
                        pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    }
                    pieces.push(Piece::Env(name));
                }
                _ => return Err(TemplateError::BadPercent),
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(OutFileTemplate {
            raw: template.to_string(),
            pieces,
        })
    }

    /// The template as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Expands the template for `pid` (sequence number 1), looking variables up with `env`.
    /// The result is relative unless the template is absolute; see [`Self::expand_in`].
    pub fn expand(
        &self,
        pid: u32,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<String, TemplateError> {
        self.expand_seq(pid, 1, env)
    }

    /// Like [`Self::expand`] with an explicit `%n` sequence number.
    pub fn expand_seq(
        &self,
        pid: u32,
        seq: u32,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<String, TemplateError> {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Pid => out.push_str(&pid.to_string()),
                Piece::Seq => out.push_str(&seq.to_string()),
                Piece::Env(name) => match env(name) {
                    Some(v) => out.push_str(&v),
                    None => return Err(TemplateError::Unset(name.clone())),
                },
            }
        }
        Ok(out)
    }

    /// Expands and makes the name absolute against the startup directory `cwd`, as Valgrind
    /// does (a relative result is prefixed with `cwd/`).
    pub fn expand_in(
        &self,
        cwd: &Path,
        pid: u32,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<PathBuf, TemplateError> {
        let s = self.expand(pid, env)?;
        Ok(if s.starts_with('/') {
            PathBuf::from(s)
        } else {
            cwd.join(s)
        })
    }
}

/// Callgrind's dump file name: `base` for the final dump (`part == None`), `base.N` for the
/// intermediate dump number `N`, then `-TT` (two digits at least) with `--separate-threads=yes`.
pub fn callgrind_dump_name(base: &str, part: Option<u32>, thread: Option<u32>) -> String {
    let mut s = base.to_string();
    if let Some(n) = part {
        s.push_str(&format!(".{n}"));
    }
    if let Some(t) = thread {
        s.push_str(&format!("-{t:02}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "HOME_X").then(|| "hx".to_string())
    }

    fn check(t: &str, want: Result<&str, TemplateError>) {
        let got = OutFileTemplate::parse(t).and_then(|p| p.expand(42, env));
        assert_eq!(got.as_deref().map_err(Clone::clone), want, "template {t:?}");
    }

    #[test]
    fn expansions() {
        check("callgrind.out.%p", Ok("callgrind.out.42"));
        check("a%%b.%q{HOME_X}.%p.%n", Ok("a%b.hx.42.1"));
        check("/abs/%p", Ok("/abs/42"));
        check("", Err(TemplateError::Empty));
        check("~/x", Err(TemplateError::Tilde));
        check("x.%z", Err(TemplateError::BadPercent));
        check("x.%", Err(TemplateError::BadPercent));
        check("x.%q", Err(TemplateError::QNoBrace));
        check("x.%q{FOO", Err(TemplateError::QNoClose));
        check("x.%q{NOPE}", Err(TemplateError::Unset("NOPE".into())));
    }

    #[test]
    fn valgrind_messages() {
        let e = OutFileTemplate::parse("x.%z").unwrap_err();
        assert_eq!(
            e.valgrind_lines("--log-file", "x.%z"),
            vec![
                "Bad option: --log-file=x.%z",
                "Expected 'p' or 'q' or '%' after '%'",
                "Use --help for more information or consult the user manual."
            ]
        );
        assert_eq!(
            TemplateError::Unset("NOPE_X".into()).to_string(),
            "Environment variable 'NOPE_X' is not set"
        );
        assert_eq!(
            TemplateError::QNoClose.to_string(),
            "Missing '}' in %q specifier"
        );
    }

    #[test]
    fn relative_is_made_absolute_and_dump_names() {
        let t = OutFileTemplate::parse("cg.%p").unwrap();
        assert_eq!(
            t.expand_in(Path::new("/w"), 7, env).unwrap(),
            PathBuf::from("/w/cg.7")
        );
        assert_eq!(callgrind_dump_name("c.out.5", Some(2), None), "c.out.5.2");
        assert_eq!(callgrind_dump_name("c.out.5", None, Some(1)), "c.out.5-01");
        assert_eq!(
            callgrind_dump_name("c.out.5", Some(3), Some(12)),
            "c.out.5.3-12"
        );
    }
}
