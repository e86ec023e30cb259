// gungraun library benchmarks for scripts/gungraun/run.sh: a recursive function at two
// sizes and an allocating sort (String formatting, Vec sort and dedup).
use gungraun::{library_benchmark, library_benchmark_group, main};
use std::hint::black_box;

fn fibonacci(n: u64) -> u64 {
    match n {
        0 | 1 => 1,
        n => fibonacci(n - 1) + fibonacci(n - 2),
    }
}

fn sort_words(n: usize) -> usize {
    let mut v: Vec<String> = (0..n).map(|i| format!("w{}", (i * 7919) % 1000)).collect();
    v.sort();
    v.dedup();
    v.len()
}

#[library_benchmark]
#[bench::short(10)]
#[bench::long(25)]
fn bench_fibonacci(value: u64) -> u64 {
    black_box(fibonacci(value))
}

#[library_benchmark]
#[bench::some(2000)]
fn bench_sort(n: usize) -> usize {
    black_box(sort_words(n))
}

library_benchmark_group!(name = group; benchmarks = bench_fibonacci, bench_sort);
main!(library_benchmark_groups = group);
