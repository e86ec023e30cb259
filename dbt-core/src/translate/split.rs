//! Moving a translation's cold part (out-of-line cases, exit stubs) away from its hot part
//! (the block body), so that the bodies of consecutive translations lie together in the host's
//! instruction cache and TLB (ARCHITECTURE.md, "Hot and cold parts").
//!
//! A translation is emitted as one piece for `host`; the references between its two parts
//! (the body's jumps to its out-of-line cases and stubs, their jumps back, the cold part's
//! reads of the body's literal pool) are label references, which the assembler keeps
//! (`crate::asm::Asm::finalize_with_crossing`); everything else the cold part reaches by
//! absolute address. `check_relocated` decodes both placements and compares every target,
//! for tests (`RGRIND_CHECK_SPLIT`).
use crate::asm::LabelRef;
use dynasmrt::relocations::{Relocation, RelocationKind};
use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind};

/// The byte offsets of a translation emitted as one piece (`Emitter`): instructions in
/// `[0, body_end)` (the body and the out-of-line parts that stay with it), data (the literal
/// pool) in `[body_end, hot_len)`, instructions in `[hot_len, len)`: the cold part.
#[derive(Clone, Copy)]
pub(super) struct Parts {
    pub body_end: usize,
    pub hot_len: usize,
}

/// Where byte `off` of a translation emitted as one piece at `host` lies with its cold part
/// (from `hot_len` on) at `cold`.
pub(super) fn placed(off: usize, host: u64, hot_len: usize, cold: u64) -> u64 {
    if off >= hot_len {
        cold + (off - hot_len) as u64
    } else {
        host + off as u64
    }
}

/// Re-encodes `code`, emitted as one piece at `host`, for its cold part (from `hot_len` on)
/// at `cold`, given the label references that cross the parts (`refs`). `None`, with `code`
/// unchanged, when one cannot be re-encoded (a `rel8`, a distance beyond `rel32`).
pub(super) fn relocate_cold(
    code: &mut [u8],
    host: u64,
    hot_len: usize,
    refs: &[LabelRef],
    cold: u64,
) -> Option<()> {
    let mut patches = Vec::with_capacity(refs.len());
    for r in refs {
        let p = &r.patch;
        if !matches!(p.relocation.kind(), RelocationKind::Relative) {
            return None;
        }
        let field = p.range(0);
        // Relative to the instruction's end, which lies with its field (though it may be
        // `hot_len` itself).
        let reference = p.location.0 - p.ref_offset as usize;
        let ref_addr = placed(field.start, host, hot_len, cold)
            .wrapping_add(reference.wrapping_sub(field.start) as u64);
        let value = placed(r.target, host, hot_len, cold).wrapping_sub(ref_addr) as i64 as isize
            + p.target_offset;
        // A field is at most 8 bytes; written aside so that a failure leaves `code` as it was.
        let mut bytes = [0u8; 8];
        let n = field.len();
        bytes[..n].copy_from_slice(&code[field.clone()]);
        p.relocation.write_value(&mut bytes[..n], value).ok()?;
        patches.push((field, bytes));
    }
    for (field, bytes) in patches {
        let n = field.len();
        code[field].copy_from_slice(&bytes[..n]);
    }
    Some(())
}

/// Decodes `original` (emitted as one piece at `host`) and `relocated` (its hot part at `host`,
/// its cold part at `cold`) side by side: every branch target and `rip`-relative address
/// must be the same place. The first difference, if any.
pub(super) fn check_relocated(
    original: &[u8],
    relocated: &[u8],
    host: u64,
    parts: Parts,
    cold: u64,
) -> Result<(), String> {
    let Parts { body_end, hot_len } = parts;
    let moved = |a: u64| match a.checked_sub(host) {
        Some(off) if off < original.len() as u64 => placed(off as usize, host, hot_len, cold),
        _ => a,
    };
    for (start, end) in [(0, body_end), (hot_len, original.len())] {
        let ip = placed(start, host, hot_len, cold);
        let mut old = Decoder::with_ip(
            64,
            &original[start..end],
            host + start as u64,
            DecoderOptions::NONE,
        );
        let mut new = Decoder::with_ip(64, &relocated[start..end], ip, DecoderOptions::NONE);
        let (mut a, mut b) = (Instruction::default(), Instruction::default());
        while old.can_decode() {
            old.decode_out(&mut a);
            new.decode_out(&mut b);
            let (want, got) = if a.is_ip_rel_memory_operand() {
                (moved(a.ip_rel_memory_address()), b.ip_rel_memory_address())
            } else if a.op0_kind() == OpKind::NearBranch64 {
                (moved(a.near_branch_target()), b.near_branch_target())
            } else {
                (0, 0)
            };
            if a.is_invalid() || a.len() != b.len() || want != got {
                return Err(format!(
                    "byte {:#x} of the translation: `{a}` reaches {got:#x} at {:#x}, not {want:#x}",
                    a.ip() - host,
                    b.ip()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::Asm;
    use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};

    /// A body that jumps to a cold case and back, a cold case that reads the body's literal
    /// and calls out by absolute address: after the move every reference lands where it did.
    #[test]
    fn references_between_the_parts_keep_their_targets() {
        let host = 0x10_0000u64;
        let mut a = Asm::new(host as usize);
        let (case, back, lit) = (
            a.new_dynamic_label(),
            a.new_dynamic_label(),
            a.new_dynamic_label(),
        );
        dynasm!(a
            ; .arch x64
            ; jne =>case
            ; =>back
            ; jmp >local
            ; local:
            ; ret
        );
        let body_end = a.offset().0;
        dynasm!(a ; .arch x64 ; .align 8 ; =>lit ; .u64 0x1234);
        let hot_len = a.offset().0;
        dynasm!(a
            ; .arch x64
            ; =>case
            ; mov rax, QWORD [=>lit]
            ; jmp =>back
            ; mov rax, QWORD 0x20_0000
            ; call rax
        );
        let (mut code, refs) = a.finalize_with_crossing(hot_len).unwrap();
        assert_eq!(refs.len(), 3, "jne, the literal's load, jmp");
        let original = code.clone();
        let cold = 0x30_0000u64;
        relocate_cold(&mut code, host, hot_len, &refs, cold).unwrap();
        let parts = Parts { body_end, hot_len };
        check_relocated(&original, &code, host, parts, cold).unwrap();
        let decode = |bytes: &[u8], ip: u64| {
            let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
            d.iter().collect::<Vec<_>>()
        };
        let hot = decode(&code[..body_end], host);
        assert_eq!(hot[0].near_branch_target(), cold);
        let cold_insns = decode(&code[hot_len..], cold);
        assert_eq!(cold_insns[0].ip_rel_memory_address(), host + 16);
        assert_eq!(cold_insns[1].near_branch_target(), host + 6);
        // A reference left out is found by the check.
        let mut partly = original.clone();
        relocate_cold(&mut partly, host, hot_len, &refs[..2], cold).unwrap();
        assert!(check_relocated(&original, &partly, host, parts, cold).is_err());
    }

    #[test]
    fn a_short_jump_across_the_parts_is_refused() {
        let host = 0x10_0000u64;
        let mut a = Asm::new(host as usize);
        let case = a.new_dynamic_label();
        dynasm!(a ; .arch x64 ; jrcxz =>case ; ret);
        let cut = a.offset().0;
        dynasm!(a ; .arch x64 ; =>case ; ret);
        let (mut code, refs) = a.finalize_with_crossing(cut).unwrap();
        let before = code.clone();
        assert!(relocate_cold(&mut code, host, cut, &refs, 0x30_0000).is_none());
        assert_eq!(code, before);
    }
}
