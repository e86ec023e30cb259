//! Valgrind's wildcard patterns (`VG_(string_match)`): `*` matches any run of bytes, `?` any
//! one byte, everything else itself (there is no escape), over the whole string. The
//! `--trace-children-skip*` options and Callgrind's function patterns use them.

/// Whether `s` matches `pat`. Linear backtracking to the last `*` (Valgrind recurses, with
/// the same answers).
pub fn matches(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // After the last `*` seen: where the pattern goes on, and where in `s` that try began.
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        match pat.get(p) {
            Some(b'*') => {
                p += 1;
                star = Some((p, i));
            }
            Some(&c) if c == b'?' || c == s[i] => {
                p += 1;
                i += 1;
            }
            _ => match star {
                Some((after, from)) => {
                    p = after;
                    i = from + 1;
                    star = Some((after, from + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn follows_valgrinds_matcher() {
        // The cases of Valgrind's m_seqmatch.c, in match-all mode.
        let cases: &[(&str, &str, bool)] = &[
            ("", "", true),
            ("a", "", false),
            ("a", "b", false),
            ("a", "a", true),
            ("a", "aa", false),
            ("*", "", true),
            ("**", "", true),
            ("*", "abc", true),
            ("*a", "abc", false),
            ("*b", "abc", false),
            ("*bc", "abc", true),
            ("a*b", "abc", false),
            ("a*c", "abc", true),
            ("*c", "abc", true),
            ("c*c", "abc", false),
            ("abc*", "abc", true),
            ("abc**", "abc", true),
            ("**abc", "abc", true),
            ("**a*b*c**", "abc", true),
            ("**a*b*d**", "abc", false),
            ("a?c", "abc", true),
            ("a?d", "abc", false),
            ("?", "", false),
            ("?", "a", true),
            ("?", "ab", false),
            ("abcd", "abc", false),
            ("ab", "abc", false),
            ("\\*", "*", false),
            ("\\*", "\\x", true),
            ("\\*", "\\*", true),
            ("*esbuild", "/usr/lib/node/esbuild", true),
            ("_dl_runtime_resolve*", "_dl_runtime_resolve_xsave", true),
            ("f?b", "fib", true),
            ("fib", "fib2", false),
        ];
        for &(p, s, want) in cases {
            assert_eq!(matches(p.as_bytes(), s.as_bytes()), want, "{p:?} {s:?}");
        }
        // No exponential blow-up.
        let long = "a".repeat(200);
        assert!(!matches(b"*a*a*a*a*a*a*a*a*b", long.as_bytes()));
    }
}
