//! Fuzzes the readers with proptest: arbitrary bytes, and valid files with random line
//! edits. No input may panic; every error must name the file. The number of cases is 256 by
//! default; set `RGRIND_FUZZ_CASES=100000` for a long run.

use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("RGRIND_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

const CALLGRIND: &str = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 5\ncmd:  ./a\npart: 1\n\n\ndesc: I1 cache: \ndesc: Timerange: Basic block 0 - 9\n\npositions: instr line\nevents: Ir Dr\nsummary: 20 3\n\n\nob=(1) /bin/a\nfl=(1) a.c\nfn=(0) main\n0x10 3 4 1\n+2 +1 2\nfi=(2) b.h\n+1 * 1\nfe=(1)\ncob=(2) /lib/c.so\ncfi=(3) c.c\ncfn=(2) f\ncalls=2 0x400 10 \n* * 12 2\njcnd=1/2 +3 * \n* * \njump=1 -4 * \n* * \n\nfn=(2)\n0x400 10 1\n\ntotals: 20 3\n";

const CACHEGRIND: &str = "desc: I1 cache: 1\ncmd: ./a 1\nevents: Ir Dr \nfl=a.c\nfn=main\n3 6 1\n4 2\nfn=???\n0 1 0\nfl=???\nfn=(below main)\n0 3 3\nsummary: 12 4\n";

fn edit(text: &str, ops: &[(usize, u8, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for (at, kind, s) in ops {
        if lines.is_empty() {
            lines.push(s.clone());
            continue;
        }
        let i = at % lines.len();
        match kind % 4 {
            0 => {
                lines.remove(i);
            }
            1 => lines.insert(i, s.clone()),
            2 => lines[i].push_str(s),
            _ => {
                let l = &mut lines[i];
                let cut = (at / 7) % (l.len() + 1);
                if l.is_char_boundary(cut) {
                    l.truncate(cut);
                }
            }
        }
    }
    lines.join("\n")
}

fn check_no_panic(text: &str) {
    match dumper::callgrind::parse_callgrind("fz.out", text) {
        Ok(parts) => {
            for p in parts {
                let _ = p.to_text(Default::default());
                let _ = dumper::annotate::callgrind_function_totals(&p, true);
            }
        }
        Err(e) => assert!(e.to_string().starts_with("fz.out"), "{e}"),
    }
    match dumper::cachegrind::parse_cachegrind("fz.out", text) {
        Ok(p) => {
            let _ = p.to_text();
        }
        Err(e) => assert!(e.to_string().starts_with("fz.out"), "{e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_no_panic(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn edited_valid_files_never_panic(
        ops in proptest::collection::vec((any::<usize>(), any::<u8>(), "[-+*0-9a-z=:() /x]{0,12}"), 1..6),
        which in any::<bool>(),
    ) {
        let base = if which { CALLGRIND } else { CACHEGRIND };
        check_no_panic(&edit(base, &ops));
    }
}

#[test]
fn base_files_are_valid_and_round_trip() {
    let parts = dumper::callgrind::parse_callgrind("c", CALLGRIND).unwrap();
    assert_eq!(parts[0].self_totals(), vec![8, 1]);
    let again =
        dumper::callgrind::parse_callgrind("c2", &parts[0].to_text(Default::default())).unwrap();
    assert_eq!(again, parts);
    let p = dumper::cachegrind::parse_cachegrind("g", CACHEGRIND).unwrap();
    assert_eq!(p.totals(), vec![12, 4]);
}
