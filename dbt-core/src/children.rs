//! Which exec'd programs run under rgrind again: Valgrind's `--trace-children`,
//! `--trace-children-skip` and `--trace-children-skip-by-arg` (m_options.c's
//! `should_we_trace_this_child`, 3.19).
use crate::pattern::matches;

/// The `--trace-children*` options. The skip lists are kept as given: comma-separated
/// patterns of [`crate::pattern::matches`], empty fields ignored (a later option replaces
/// an earlier one, as in Valgrind).
#[derive(Clone, Debug, Default)]
pub struct ChildTracing {
    pub trace: bool,
    /// Patterns matched against the exec'd program's path, as the guest passed it.
    pub skip: String,
    /// Patterns matched against each of the program's arguments, `argv[0]` included (Valgrind
    /// hands its checker the whole vector, although its comment says otherwise).
    pub skip_by_arg: String,
}

impl ChildTracing {
    /// Whether the program at `path`, run with `argv`, runs under rgrind.
    pub fn should_trace(&self, path: &[u8], argv: &[&[u8]]) -> bool {
        if path.is_empty() || !self.trace {
            return self.trace;
        }
        if patterns(&self.skip).any(|p| matches(p, path)) {
            return false;
        }
        !patterns(&self.skip_by_arg).any(|p| argv.iter().any(|a| matches(p, a)))
    }
}

/// The non-empty fields of a comma-separated pattern list.
fn patterns(list: &str) -> impl Iterator<Item = &[u8]> {
    list.split(',').filter(|p| !p.is_empty()).map(str::as_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_lists_apply_only_when_tracing() {
        let t = ChildTracing {
            trace: true,
            skip: ",*/sh,,*env".into(),
            skip_by_arg: "--no-trace*".into(),
        };
        assert!(!t.should_trace(b"/bin/sh", &[b"sh"]));
        assert!(!t.should_trace(b"/usr/bin/env", &[b"env"]));
        assert!(t.should_trace(b"/bin/ls", &[b"ls", b"-l"]));
        assert!(!t.should_trace(b"/bin/ls", &[b"ls", b"--no-trace-me"]));
        assert!(!t.should_trace(b"/bin/ls", &[b"--no-trace", b"x"]));
        // An empty path: the plain --trace-children answer.
        assert!(t.should_trace(b"", &[b"sh"]));
        let off = ChildTracing {
            trace: false,
            ..ChildTracing::default()
        };
        assert!(!off.should_trace(b"/bin/ls", &[]));
    }
}
