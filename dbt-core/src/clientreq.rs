//! Valgrind client requests: the 19-byte magic sequence recognised at translation time and
//! the request handled in the dispatcher.
//!
//! The sequence is `rol rdi,3; rol rdi,13; rol rdi,61; rol rdi,51; xchg rbx,rbx`: rax points
//! at six u64 `{request, arg1..arg5}` and the result goes to rdx, which holds the caller's
//! default (natively the sequence does nothing, so rdx keeps it). It counts as one
//! instruction and ends the block.
//!
//! # Invariants
//! * A recognised request is represented in the block as an `xchg rbx,rbx` instruction with
//!   the address of the first `rol` and length 19 (`is_request` tells it apart from a real
//!   3-byte `xchg`).
//! * Core requests are answered here (RUNNING_ON_VALGRIND → 1, DISCARD_TRANSLATIONS); every
//!   other request goes to the tool, whose default answer leaves rdx unchanged.
//!
//! Not handled: the other markers (`xchg rcx,rcx` NRADDR, `xchg rdx,rdx` call-noredir,
//! `xchg rdi,rdi` IR injection) run natively as the no-ops they are.
use crate::context::{reg, ThreadContext};
use crate::core_state::Core;
use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Register};

/// The four rotates of the preamble.
const PREAMBLE: [u8; 16] = [
    0x48, 0xc1, 0xc7, 0x03, 0x48, 0xc1, 0xc7, 0x0d, 0x48, 0xc1, 0xc7, 0x3d, 0x48, 0xc1, 0xc7, 0x33,
];
/// `xchg rbx,rbx`: a client request.
const MARKER: [u8; 3] = [0x48, 0x87, 0xdb];
/// Bytes of the whole sequence (Valgrind's VG_CLREQ_SZB).
pub const REQUEST_LEN: usize = 19;

pub const RUNNING_ON_VALGRIND: u64 = 0x1001;
pub const DISCARD_TRANSLATIONS: u64 = 0x1002;

/// If the bytes at `at` in `buf` (guest address `addr`) are a client request, the single
/// instruction standing for it.
pub fn recognise(buf: &[u8], at: usize, addr: u64) -> Option<Instruction> {
    let seq = buf.get(at..at + REQUEST_LEN)?;
    if seq[..16] != PREAMBLE || seq[16..] != MARKER {
        return None;
    }
    let mut d = Decoder::with_ip(64, &seq[16..], addr + 16, DecoderOptions::NONE);
    let mut insn = d.decode();
    insn.set_ip(addr);
    insn.set_len(REQUEST_LEN);
    insn.set_next_ip(addr + REQUEST_LEN as u64);
    Some(insn)
}

/// Whether `insn` stands for a client request (see `recognise`).
pub fn is_request(insn: &Instruction) -> bool {
    insn.code() == Code::Xchg_rm64_r64
        && insn.len() == REQUEST_LEN
        && insn.op0_register() == Register::RBX
        && insn.op1_register() == Register::RBX
}

/// Handles the request whose argument block rax points at; sets rdx to the result.
pub fn handle(ctx: &mut ThreadContext, core: &mut Core) {
    let mut raw = [0u8; 48];
    if crate::translate::read_guest(ctx.gpr[reg::RAX], &mut raw) != raw.len() {
        return;
    }
    let mut args = [0u64; 6];
    for (i, a) in args.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
        *a = u64::from_le_bytes(b);
    }
    match args[0] {
        RUNNING_ON_VALGRIND => ctx.gpr[reg::RDX] = 1,
        DISCARD_TRANSLATIONS => {
            let start = args[1];
            // Every thread's table: another thread would keep running the old code.
            crate::thread::forget_translations(
                &core.cache.invalidate(start, start.saturating_add(args[2])),
            );
            ctx.gpr[reg::RDX] = 0;
        }
        _ => {
            let reply = core.tool.client_request(&args);
            if let Some(v) = reply.value {
                ctx.gpr[reg::RDX] = v;
            }
            if reply.discard_translations {
                crate::thread::forget_translations(&core.cache.invalidate(0, u64::MAX));
            }
        }
    }
}
