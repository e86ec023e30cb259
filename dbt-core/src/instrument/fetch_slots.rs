//! The slow path of the I1 fetch check (`emit::Plan::fetch`), in Rust: the lookup of each
//! line the fetch touches in the I1's slots, and the repointing of the check at the slots
//! the lines are in now, so that its next run finds them inline.
//!
//! The check's record, 8-byte words among its translation's constants: the fetch's address,
//! then per line one word of four 16-bit fields — the fetch's length (first line only; 0 on
//! the second), and the distances back from the check's end (`back`, where the slow path
//! returns) to the 32-bit address fields to rewrite with the slot's address plus 0 (its
//! line word, or the low half of it), plus 4 (the high half) and plus 8 (its stamp); a
//! distance 0 is no field.
//!
//! # Invariants
//! * A check compares slots of its lines' own sets only (`locate` and `touch` return those),
//!   so its stamp stores never reorder another set, and a slot that holds the line is the
//!   line's (a line is in one slot of its set at most); a stale address costs a slow path,
//!   never a wrong count.
//! * Guest threads run one at a time, so no other thread runs the code being rewritten.
use super::SlotI1;

/// What a check's address field holds, relative to its slot's line word: the line word (or
/// its low half), its high half, the stamp.
#[derive(Clone, Copy)]
pub(super) enum SlotField {
    Line = 0,
    High = 4,
    Stamp = 8,
}

impl SlotField {
    const ALL: [SlotField; 3] = [SlotField::Line, SlotField::High, SlotField::Stamp];

    /// The bit offset of the field's distance in its line's record word.
    fn shift(self) -> u32 {
        match self {
            SlotField::Line => 16,
            SlotField::High => 32,
            SlotField::Stamp => 48,
        }
    }
}

/// The record of a check of the fetch of `len` bytes at `addr` whose end is at offset
/// `end` of its translation, with `fields[k]` the (field, offset) pairs of its `k`th line.
pub(super) fn record_words(
    addr: u64,
    len: u64,
    end: usize,
    fields: &[Vec<(SlotField, usize)>],
) -> Vec<u64> {
    let mut words = vec![addr];
    for (k, line_fields) in fields.iter().enumerate() {
        let mut word = if k == 0 { len } else { 0 };
        for &(field, at) in line_fields {
            debug_assert!(end - at < 1 << 16, "fetch check too long");
            word |= ((end - at) as u64) << field.shift();
        }
        words.push(word);
    }
    words
}

/// `cache` is the check's `&'static SlotI1`, `back` the address of its end, `record` its
/// record. Returns 1 if a line missed in the I1, else 0. Integer-only.
pub(super) extern "C" fn fetch_slots_slow(cache: u64, back: u64, record: u64) -> u64 {
    // SAFETY: `cache` is the `&'static SlotI1` the check was emitted with.
    let c = unsafe { &*(cache as *const SlotI1) };
    // SAFETY: `record` is the check's record in the literal pool of the translation that is
    // running (so not freed), two or three words as the module documentation says.
    let word = |k: usize| unsafe { (record as *const u64).add(k).read_unaligned() };
    let (addr, first_word) = (word(0), word(1));
    let len = (first_word & 0xffff).max(1);
    let first = addr >> c.line_bits;
    let last = (addr + len - 1) >> c.line_bits;
    let mut missed = 0;
    for (k, line) in (first..=last).enumerate() {
        // SAFETY: `touch` is the simulator's lookup (`SlotI1`'s contract); the I1 is this
        // thread's alone while guest code runs.
        let slot = unsafe { (c.touch)(c.cache, line) };
        missed |= slot & 1;
        let fields = if k == 0 { first_word } else { word(2) };
        repoint(back, fields, slot & !1);
    }
    missed
}

/// Rewrites the address fields `fields` names (see the module documentation) for `slot`.
fn repoint(back: u64, fields: u64, slot: u64) {
    for field in SlotField::ALL {
        let distance = (fields >> field.shift()) & 0xffff;
        if distance != 0 {
            let value = (slot + field as u64) as u32;
            let field = (back - distance) as *mut u32;
            // SAFETY: the field lies in the hot part of the running translation (in the
            // writable code cache), `distance` bytes before its end, as emitted; slot
            // addresses are below 2 GiB when the check has fields (`Plan::fetch`). Written
            // only when it changes: a store to code the host is running flushes its
            // pipeline, and most slow paths are misses into the slot the check names
            // already (`SlotI1::locate`).
            unsafe {
                if field.read_unaligned() != value {
                    field.write_unaligned(value);
                }
            }
        }
    }
}
