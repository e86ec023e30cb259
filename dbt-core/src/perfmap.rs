//! Debugging aid: with `RGRIND_PERF_MAP` set, every translation's regions (guest code, the
//! tool's inline checks, its out-of-line cases, exit stubs) are appended to
//! `/tmp/perf-<pid>.map`, the file `perf report` reads to name samples in JIT code. Each
//! region is named after what it is, not after its block, so `perf report --sort sym`
//! shows where translated code spends its time by kind (`rgrind:body`, `rgrind:clg-short`).
use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// 0: not decided yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);
static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

thread_local! {
    /// Region starts of the translation being emitted: (offset in its buffer, name).
    static MARKS: RefCell<Vec<(usize, &'static str)>> = const { RefCell::new(Vec::new()) };
}

pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("RGRIND_PERF_MAP").is_some();
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        s => s == 2,
    }
}

/// A region named `name` starts at byte `off` of the translation being emitted.
pub fn mark(off: usize, name: &'static str) {
    if enabled() {
        MARKS.with(|m| m.borrow_mut().push((off, name)));
    }
}

/// The translation of `len` bytes was placed, its byte `off` at `placed(off)` (a region
/// does not straddle the places of its parts): writes its regions.
pub fn publish(len: usize, placed: impl Fn(usize) -> u64) {
    if !enabled() {
        return;
    }
    let mut marks = MARKS.with(|m| std::mem::take(&mut *m.borrow_mut()));
    marks.sort_by_key(|&(off, _)| off);
    let mut text = String::new();
    for (k, &(off, name)) in marks.iter().enumerate() {
        let end = marks.get(k + 1).map_or(len, |&(o, _)| o).min(len);
        if end > off {
            text.push_str(&format!(
                "{:x} {:x} rgrind:{name}\n",
                placed(off),
                end - off
            ));
        }
    }
    append(&text);
}

fn append(text: &str) {
    let mut f = FILE.lock().unwrap_or_else(|p| p.into_inner());
    if f.is_none() {
        let path = format!("/tmp/perf-{}.map", std::process::id());
        *f = std::fs::File::create(path).ok();
    }
    if let Some(file) = f.as_mut() {
        // A debugging aid: a failed write only loses names in the profile.
        let _ = file.write_all(text.as_bytes());
    }
}

/// Code of `len` bytes at `host` outside any translation (a shared routine): one region.
pub fn publish_one(host: u64, len: usize, name: &'static str) {
    if !enabled() {
        return;
    }
    append(&format!("{host:x} {len:x} rgrind:{name}\n"));
}

/// Drops the marks of a translation that was abandoned.
pub fn discard() {
    if enabled() {
        MARKS.with(|m| m.borrow_mut().clear());
    }
}
