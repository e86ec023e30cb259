//! Real programs nobody on this project wrote, run as a user would (found through `$PATH`),
//! compared with their native runs. A case whose programs are not installed prints a message
//! and is skipped.

use rgrind_tests::{check_all, check_transparent, which, Cmd};

/// (label, programs that must be installed, command line)
type Case = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

const CASES: &[Case] = &[
    ("ls", &["ls"], &["ls", "-la", "/usr/share/doc"]),
    ("sort", &["sh", "seq", "sort", "head"], &["sh", "-c", "seq 1 100000 | sort -r | head -3"]),
    ("gzip", &["sh", "seq", "gzip", "sha256sum"], &["sh", "-c", "seq 1 200000 | gzip -c | gzip -dc | sha256sum"]),
    ("sha256sum", &["sha256sum", "gzip"], &["sha256sum", "/usr/bin/gzip"]),
    ("python3", &["/usr/bin/python3"], &["/usr/bin/python3", "-c", "print(sum(i*i for i in range(200000)))"]),
    ("perl", &["perl"], &["perl", "-e", "my %h; $h{$_ % 1000} += $_ for 1..200000; print scalar(keys %h), qq(\\n);"]),
    (
        "sqlite3",
        &["sqlite3"],
        &[
            "sqlite3",
            ":memory:",
            "create table t(a,b); with recursive c(x) as (select 1 union all select x+1 from c where x<20000) \
             insert into t select x, x*x from c; select count(*), sum(b) from t where a % 7 = 3;",
        ],
    ),
];

fn installed(program: &str) -> bool {
    if program.starts_with('/') {
        std::path::Path::new(program).is_file()
    } else {
        which(program).is_some()
    }
}

#[test]
fn real_programs_run_the_same() {
    let present: Vec<&Case> = CASES
        .iter()
        .filter(|(label, needs, _)| {
            let missing: Vec<&&str> = needs.iter().filter(|p| !installed(p)).collect();
            if !missing.is_empty() {
                println!("skipping real-program case {label}: not installed: {missing:?}");
            }
            missing.is_empty()
        })
        .collect();
    check_all(
        &present,
        |c| c.0.to_owned(),
        |(_, _, argv)| {
            let native = check_transparent(&Cmd::new(argv[0]).args(&argv[1..]))?;
            if native.stdout.is_empty() {
                return Err(format!(
                    "the program printed nothing natively (a test bug)\n{}",
                    native.describe()
                ));
            }
            Ok(())
        },
    );
}
