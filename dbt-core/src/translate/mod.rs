//! Translation of one guest basic block into the code cache.
//!
//! Pipeline: `read_guest` copies the guest bytes (never faulting), `decode_block` cuts a
//! single-entry block with iced-x86, and `emit_block` writes the host code: guest instructions
//! copied byte for byte, RIP-relative operands re-encoded for the new address, control transfers
//! replaced by exits (patchable `jmp rel32` to a stub, or the inline indirect-branch lookup).
//!
//! # Invariants
//! * At every guest instruction boundary inside a translation the host registers and flags hold
//!   the exact guest state; glue between instructions only uses `gs:` spill slots and restores
//!   what it borrowed before the next guest instruction or exit.
//! * Glue never changes arithmetic flags (only `mov`, `lea`, `movzx`, `jrcxz`, `jmp`).
//! * `call` pushes the guest return address.
//!
//! Deliberately absent: instrumentation (tools add it through `crate::tool`), block chasing
//! across direct jumps.
mod split;

use crate::asm::Asm;
use crate::cache::{Block, CodeCache, ExitKind, ExitRecord, FetchedLines};
use crate::context::*;
use crate::instrument::ExitLiveness;
use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use iced_x86::{
    Code, ConditionCode, Decoder, DecoderError, DecoderOptions, Encoder, FlowControl, Formatter,
    Instruction, InstructionInfoFactory, IntelFormatter, MemoryOperand, OpKind, Register,
};

/// Bytes of the prologue at the start of every translation through which the inline
/// indirect-branch lookup enters it (two `gs: mov` that restore guest rcx and rdx); the
/// block's registered start follows it. The IBL table holds `start - IBL_ENTRY_OFFSET`.
pub const IBL_ENTRY_OFFSET: u64 = 18;

/// Most guest bytes one block may span.
const MAX_BLOCK_BYTES: usize = 2048;
/// Bytes read for a block at first, and how close to their end decoding may come before the
/// block is decoded again from `MAX_BLOCK_BYTES` (an instruction or a client-request
/// preamble may have been cut off).
const FIRST_READ: usize = 256;
const READ_MARGIN: u64 = 32;

#[derive(Clone, Copy, Debug)]
pub struct TranslateOptions {
    pub max_insns: usize,
    pub trace_blocks: bool,
    /// Whether blocks get a line entry (`Block::line_entry`); off for checks that it
    /// changes no count (`RGRIND_NO_LINE_ENTRIES`).
    pub line_entries: bool,
    /// Whether cache checks share their scans past way 1 (`Plan::share_scans`); off for checks
    /// that sharing changes no count (`RGRIND_NO_SHARED_SCANS`).
    pub shared_scans: bool,
    /// Whether translations' out-of-line code is placed apart from their bodies
    /// (`split::relocate_cold`); off for comparisons (`RGRIND_NO_COLD_PARTS`).
    pub cold_parts: bool,
    /// Whether each placement of a cold part is checked by decoding
    /// (`split::check_relocated`, `RGRIND_CHECK_SPLIT`): for tests.
    pub check_split: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// The code cache could not be mapped (a limit).
    #[error("cannot map memory for the code cache")]
    CacheFull,
    /// An instruction rgrind cannot translate (a limit, reported to the user).
    #[error("unsupported instruction `{text}` at guest address {addr:#x}")]
    Unsupported { addr: u64, text: String },
    /// Emission failed (a bug).
    #[error("internal error translating the block at {addr:#x}: {what}")]
    Internal { addr: u64, what: String },
}

/// Formats an instruction in Intel syntax for messages.
pub fn insn_text(insn: &Instruction) -> String {
    let mut s = String::new();
    IntelFormatter::new().format(insn, &mut s);
    s
}

pub use crate::guest_mem::{read as read_guest, write as write_guest};

/// How a decoded block ends.
#[derive(Debug)]
enum BlockEnd {
    /// Ran into the instruction limit or unreadable bytes: fall through to `next`.
    FallThrough(u64),
    /// The last instruction in `insns` transfers control.
    Control,
    /// The instruction at `addr` traps natively.
    Trap { addr: u64, signal: i32, next: u64 },
}

fn ends_block(insn: &Instruction) -> bool {
    matches!(insn.code(), Code::Syscall | Code::Cpuid) || insn.flow_control() != FlowControl::Next
}

fn decode_block(guest: u64, buf: &[u8], opts: &TranslateOptions) -> (Vec<Instruction>, BlockEnd) {
    let mut decoder = Decoder::with_ip(64, buf, guest, DecoderOptions::NONE);
    let mut insns = Vec::new();
    let mut next = guest;
    loop {
        if insns.len() >= opts.max_insns {
            return (insns, BlockEnd::FallThrough(next));
        }
        if !decoder.can_decode() {
            if insns.is_empty() {
                return (
                    insns,
                    BlockEnd::Trap {
                        addr: next,
                        signal: libc::SIGSEGV,
                        next,
                    },
                );
            }
            return (insns, BlockEnd::FallThrough(next));
        }
        let at = (next - guest) as usize;
        if let Some(req) = crate::clientreq::recognise(buf, at, next) {
            insns.push(req);
            return (insns, BlockEnd::Control);
        }
        let insn = decoder.decode();
        if insn.is_invalid() {
            if decoder.last_error() == DecoderError::NoMoreBytes && !insns.is_empty() {
                return (insns, BlockEnd::FallThrough(next));
            }
            let signal = if decoder.last_error() == DecoderError::NoMoreBytes {
                libc::SIGSEGV
            } else {
                libc::SIGILL
            };
            return (
                insns,
                BlockEnd::Trap {
                    addr: next,
                    signal,
                    next,
                },
            );
        }
        if let Some(signal) = trap_signal(&insn) {
            return (
                insns,
                BlockEnd::Trap {
                    addr: insn.ip(),
                    signal,
                    next: insn.next_ip(),
                },
            );
        }
        next = insn.next_ip();
        let end = ends_block(&insn);
        insns.push(insn);
        if end {
            return (insns, BlockEnd::Control);
        }
    }
}

/// The signal an instruction raises natively when rgrind must not run it itself.
fn trap_signal(insn: &Instruction) -> Option<i32> {
    match insn.code() {
        Code::Int3 => Some(libc::SIGTRAP),
        Code::Ud2 | Code::Ud0 | Code::Ud1_r32_rm32 | Code::Ud1_r64_rm64 => Some(libc::SIGILL),
        Code::Hlt | Code::Int_imm8 | Code::Into | Code::Int1 => Some(libc::SIGSEGV),
        Code::Syscall => None,
        _ => match insn.flow_control() {
            FlowControl::Interrupt | FlowControl::Exception => Some(libc::SIGSEGV),
            _ => None,
        },
    }
}

/// Whether the instruction touches GS, which rgrind owns.
fn uses_gs(insn: &Instruction) -> bool {
    // A GS prefix is inert on an instruction that reads no memory: one without a memory
    // operand, or a (reserved, hint) NOP whose memory form only encodes an address.
    let is_nop = matches!(
        insn.mnemonic(),
        iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Reservednop
    );
    let gs_memory = insn.segment_prefix() == Register::GS
        && !is_nop
        && ((0..insn.op_count()).any(|i| insn.op_kind(i) == OpKind::Memory)
            || insn.is_string_instruction());
    gs_memory
        || (0..insn.op_count())
            .any(|i| insn.op_kind(i) == OpKind::Register && insn.op_register(i) == Register::GS)
        || matches!(
            insn.code(),
            Code::Rdgsbase_r32
                | Code::Rdgsbase_r64
                | Code::Wrgsbase_r32
                | Code::Wrgsbase_r64
                | Code::Swapgs
        )
}

/// Condition-code number (0..=15) of a `jcc`/`setcc`/`cmovcc` condition, as encoded in the
/// low nibble of the opcode; None for instructions without a condition.
pub(crate) fn cc_number(cc: ConditionCode) -> Option<u8> {
    Some(match cc {
        ConditionCode::o => 0,
        ConditionCode::no => 1,
        ConditionCode::b => 2,
        ConditionCode::ae => 3,
        ConditionCode::e => 4,
        ConditionCode::ne => 5,
        ConditionCode::be => 6,
        ConditionCode::a => 7,
        ConditionCode::s => 8,
        ConditionCode::ns => 9,
        ConditionCode::p => 10,
        ConditionCode::np => 11,
        ConditionCode::l => 12,
        ConditionCode::ge => 13,
        ConditionCode::le => 14,
        ConditionCode::g => 15,
        ConditionCode::None => return None,
    })
}

/// Memory operand of `insn` as a standalone operand (for `mov reg, <it>`).
pub(crate) fn memory_operand(insn: &Instruction) -> MemoryOperand {
    let seg = insn.segment_prefix();
    MemoryOperand::new(
        insn.memory_base(),
        insn.memory_index(),
        insn.memory_index_scale(),
        insn.memory_displacement64() as i64,
        if insn.memory_base() == Register::None && insn.memory_index() == Register::None {
            8
        } else {
            insn.memory_displ_size().max(1)
        },
        false,
        seg,
    )
}

struct PendingExit {
    kind: ExitKind,
    target: u64,
    label: DynamicLabel,
    /// Offset of the rel32 patch field, if patchable.
    patch_off: Option<usize>,
    /// Offset of the exit's stub (set by `stubs`).
    stub_off: usize,
    fetched: Option<FetchedLines>,
}

struct Emitter {
    ops: Asm,
    host: u64,
    exits: Vec<PendingExit>,
    first_exit_id: u32,
    /// What the instrumentation's last fetch check left fetched (`Plan::fetched`), for the
    /// exits emitted next.
    fetched: Option<FetchedLines>,
}

const S0: i32 = scratch_off(0);
const S1: i32 = scratch_off(1);
const S2: i32 = scratch_off(2);

impl Emitter {
    fn off(&self) -> usize {
        self.ops.offset().0
    }

    /// Pads with NOPs so that a rel32 starting `prefix` bytes from here is 4-byte aligned.
    fn align_rel32(&mut self, prefix: usize) {
        while !(self.host as usize + self.off() + prefix).is_multiple_of(4) {
            self.ops.push(0x90);
        }
    }

    fn new_exit(&mut self, kind: ExitKind, target: u64) -> DynamicLabel {
        let label = self.ops.new_dynamic_label();
        self.exits.push(PendingExit {
            kind,
            target,
            label,
            patch_off: None,
            stub_off: 0,
            fetched: self.fetched,
        });
        label
    }

    /// A patchable `jmp rel32` to a new exit stub.
    fn jmp_exit(&mut self, kind: ExitKind, target: u64) {
        let label = self.new_exit(kind, target);
        self.align_rel32(1);
        dynasm!(self.ops ; .arch x64 ; jmp =>label);
        let off = self.off() - 4;
        self.exits.last_mut().unwrap().patch_off = Some(off);
    }

    /// A patchable `jcc rel32` to a new exit stub.
    fn jcc_exit(&mut self, cc: u8, target: u64) {
        let label = self.new_exit(ExitKind::Direct, target);
        self.align_rel32(2);
        let at = self.off();
        self.jcc_to(cc, label);
        debug_assert_eq!(self.off(), at + 6);
        self.exits.last_mut().unwrap().patch_off = Some(at + 2);
    }

    /// `jcc rel32` with condition `cc` (0..=15) to `label`.
    fn jcc_to(&mut self, cc: u8, label: DynamicLabel) {
        macro_rules! jcc {
            ($($n:literal => $op:ident),*) => {
                match cc {
                    $($n => { dynasm!(self.ops ; .arch x64 ; $op =>label); })*
                    _ => unreachable!("condition codes are 0..=15"),
                }
            };
        }
        jcc!(0 => jo, 1 => jno, 2 => jb, 3 => jae, 4 => je, 5 => jne, 6 => jbe, 7 => ja,
             8 => js, 9 => jns, 10 => jp, 11 => jnp, 12 => jl, 13 => jge, 14 => jle, 15 => jg);
    }

    /// Pushes the 64-bit guest return address without touching flags or registers.
    ///
    /// One 8-byte `push` through a borrowed rcx (restored after, unless `rcx_saved`: an
    /// indirect call's transfer has it in `S0` already and uses it after): the `ret` reads
    /// the slot with one 8-byte load, which two 4-byte stores would keep from being
    /// store-forwarded.
    fn push_return_address(&mut self, ret: u64, rcx_saved: bool) {
        let r = ret as i64;
        if rcx_saved {
            dynasm!(self.ops ; .arch x64 ; mov rcx, QWORD r ; push rcx);
            return;
        }
        dynasm!(self.ops
            ; .arch x64
            ; gs mov QWORD [S2], rcx
            ; mov rcx, QWORD r
            ; push rcx
            ; gs mov rcx, QWORD [S2]
        );
    }

    /// Indirect transfer to the guest address in rdx; rcx and rdx were saved to S0/S1. A hit
    /// jumps to the target translation's IBL entry ([`IBL_ENTRY_OFFSET`] before its start),
    /// which restores them: the jump goes through a register, not through memory just
    /// written, so a mispredicted target is resolved sooner.
    fn ibl(&mut self) {
        let ibl = OFF_IBL as i32;
        let ibl_host = OFF_IBL as i32 + 8;
        let target = OFF_IBL_TARGET as i32;
        let exit_id = OFF_EXIT_ID as i32;
        let exit_fn = OFF_EXIT_FN as i32;
        let miss = EXIT_IBL_MISS as i32;
        dynasm!(self.ops
            ; .arch x64
            ; movzx ecx, dx
            ; lea rcx, [rcx * 8]
            ; gs mov rcx, QWORD [rcx * 2 + ibl]
            ; lea rcx, [rcx + rdx]
            ; jrcxz >hit
            ; gs mov QWORD [target], rdx
            ; gs mov rcx, QWORD [S0]
            ; gs mov rdx, QWORD [S1]
            ; gs mov DWORD [exit_id], miss
            ; gs jmp QWORD [exit_fn]
            ; hit:
            ; movzx ecx, dx
            ; lea rcx, [rcx * 8]
            ; gs mov rcx, QWORD [rcx * 2 + ibl_host]
            ; jmp rcx
        );
    }

    /// Before the IBL (rdx = the target, rcx and rdx saved to S0/S1): a target equal to
    /// `expected` leaves through a direct exit, which is linked to its translation like any
    /// direct branch; any other falls through. Flag-free.
    fn expect_target(&mut self, expected: u64) {
        let other = self.ops.new_dynamic_label();
        dynasm!(self.ops
            ; .arch x64
            ; mov rcx, QWORD expected.wrapping_neg() as i64
            ; lea rcx, [rcx + rdx]
            ; jrcxz >same
            ; jmp =>other
            ; same:
            ; gs mov rcx, QWORD [S0]
            ; gs mov rdx, QWORD [S1]
        );
        self.jmp_exit(ExitKind::Direct, expected);
        dynasm!(self.ops ; .arch x64 ; =>other);
    }

    /// `mov rdx, <operand 0 of insn>` for indirect jumps and calls, with RIP-relative
    /// operands resolved for this host address.
    fn load_target(&mut self, insn: &Instruction) -> Result<(), String> {
        if insn.op0_kind() == OpKind::Register {
            let r = insn.op0_register();
            let mov = Instruction::with2(Code::Mov_r64_rm64, Register::RDX, r)
                .map_err(|e| e.to_string())?;
            return self.encode(&mov);
        }
        if insn.is_ip_rel_memory_operand() {
            let abs = insn.ip_rel_memory_address();
            let mov = Instruction::with2(
                Code::Mov_r64_rm64,
                Register::RDX,
                MemoryOperand::with_base_displ(Register::RIP, abs as i64),
            )
            .map_err(|e| e.to_string())?;
            if self.encode(&mov).is_ok() {
                return Ok(());
            }
            let hi = abs as i64;
            dynasm!(self.ops ; .arch x64 ; mov rdx, QWORD hi ; mov rdx, QWORD [rdx]);
            return Ok(());
        }
        let mov = Instruction::with2(Code::Mov_r64_rm64, Register::RDX, memory_operand(insn))
            .map_err(|e| e.to_string())?;
        self.encode(&mov)
    }

    /// `popfq` without setting the real AC flag: the guest's goes to `guest_ac`
    /// (`ThreadContext::guest_ac`). With AC set in the popped value, `popfq` runs on a copy
    /// without it in a spill slot (rsp pointed there for the one instruction: rgrind's signal
    /// handler runs on its own stack), so guest memory is only read. The `bt`/`btr` change
    /// flags that the `popfq` then sets.
    fn popfq(&mut self) {
        let (ac, done) = (self.ops.new_dynamic_label(), self.ops.new_dynamic_label());
        let (slot, flag) = (OFF_GUEST_AC as i32, RFLAGS_AC as i32);
        dynasm!(self.ops
            ; .arch x64
            // Reads the slot as `popfq` would: a fault here is the guest's.
            ; bt QWORD [rsp], 18
            ; jc =>ac
            ; gs mov QWORD [slot], 0
            ; popfq
            ; jmp =>done
            ; =>ac
            ; gs mov QWORD [slot], flag
            ; gs mov QWORD [S0], rax
            ; mov rax, QWORD [rsp]
            ; btr rax, 18
            ; gs mov QWORD [S1], rax
            ; gs mov rax, QWORD [OFF_SELF as i32]
            ; lea rax, [rax + S1]
            ; gs mov QWORD [S2], rsp
            ; mov rsp, rax
            ; popfq
            ; gs mov rsp, QWORD [S2]
            ; lea rsp, [rsp + 8]
            ; gs mov rax, QWORD [S0]
            ; =>done
        );
    }

    /// `pushfq` with the guest's AC flag (`guest_ac`) in the pushed value; flag-free after
    /// the push (the real AC is clear, so adding the bit sets it).
    fn pushfq(&mut self) {
        dynasm!(self.ops
            ; .arch x64
            ; pushfq
            ; gs mov QWORD [S0], rax
            ; gs mov QWORD [S1], rcx
            ; mov rax, QWORD [rsp]
            ; gs mov rcx, QWORD [OFF_GUEST_AC as i32]
            ; lea rax, [rax + rcx]
            ; mov QWORD [rsp], rax
            ; gs mov rcx, QWORD [S1]
            ; gs mov rax, QWORD [S0]
        );
    }

    /// Encodes `insn` at the current host position.
    fn encode(&mut self, insn: &Instruction) -> Result<(), String> {
        let ip = self.host + self.off() as u64;
        let mut enc = Encoder::new(64);
        enc.encode(insn, ip).map_err(|e| e.to_string())?;
        let bytes = enc.take_buffer();
        self.ops.extend(bytes.iter().copied());
        Ok(())
    }

    /// An XSAVE-family instruction with its requested-feature mask (EDX:EAX) cut down to the
    /// guest's XCR0 (`xcr0`, a low mask like 7), so it touches no state component the guest
    /// was not told of: the guest sized its save area from the CPUID it was shown. Flag-free
    /// (BMI2 shifts; the model that needs this claims BMI2, and the host has it).
    // dynasm's expansion of `Rq(reg)` converts a u8 to itself.
    #[allow(clippy::useless_conversion)]
    fn masked_xsave(&mut self, insn: &Instruction, bytes: &[u8], xcr0: u32) -> Result<(), String> {
        debug_assert!(xcr0 != 0 && (xcr0 & (xcr0 + 1)) == 0, "a low mask");
        let shift = 32 - xcr0.count_ones() as i32;
        let in_address = |r: Register| {
            insn.memory_base().full_register() == r || insn.memory_index().full_register() == r
        };
        // The mask lives in rax/rdx; an address computed from them is taken first.
        let address_reg = if in_address(Register::RAX) || in_address(Register::RDX) {
            let r = [Register::RBX, Register::RSI, Register::RDI, Register::R8]
                .into_iter()
                .find(|&r| !uses_register(insn, r))
                .ok_or("no free scratch register")?;
            Some(r)
        } else {
            None
        };
        dynasm!(self.ops ; .arch x64 ; gs mov QWORD [S0], rax ; gs mov QWORD [S1], rdx);
        if let Some(r) = address_reg {
            let lea = Instruction::with2(Code::Lea_r64_m, r, memory_operand(insn))
                .map_err(|e| e.to_string())?;
            dynasm!(self.ops ; .arch x64 ; gs mov QWORD [S2], Rq(r.number() as u8));
            self.encode(&lea)?;
        }
        dynasm!(self.ops ; .arch x64 ; mov edx, shift);
        for code in [Code::VEX_Shlx_r32_rm32_r32, Code::VEX_Shrx_r32_rm32_r32] {
            let op = Instruction::with3(code, Register::EAX, Register::EAX, Register::EDX)
                .map_err(|e| e.to_string())?;
            self.encode(&op)?;
        }
        dynasm!(self.ops ; .arch x64 ; mov edx, 0);
        if let Some(r) = address_reg {
            let mut moved = *insn;
            moved.set_memory_base(r);
            moved.set_memory_index(Register::None);
            moved.set_memory_index_scale(1);
            moved.set_memory_displacement64(0);
            moved.set_memory_displ_size(0);
            self.encode(&moved)?;
            dynasm!(self.ops ; .arch x64 ; gs mov Rq(r.number() as u8), QWORD [S2]);
        } else if insn.is_ip_rel_memory_operand() {
            self.rip_relative(insn)?;
        } else {
            self.ops.extend(bytes.iter().copied());
        }
        dynasm!(self.ops ; .arch x64 ; gs mov rdx, QWORD [S1] ; gs mov rax, QWORD [S0]);
        Ok(())
    }

    /// Copies a RIP-relative instruction, re-encoded for its new address; if the data is out
    /// of rel32 reach, goes through a borrowed scratch register.
    // dynasm's expansion of `Rq(reg)` converts a u8 to itself.
    #[allow(clippy::useless_conversion)]
    fn rip_relative(&mut self, insn: &Instruction) -> Result<(), String> {
        if self.encode(insn).is_ok() {
            return Ok(());
        }
        let abs = insn.ip_rel_memory_address();
        if insn.code() == Code::Lea_r64_m {
            let r = insn.op0_register();
            let mov = Instruction::with2(Code::Mov_r64_imm64, r, abs).map_err(|e| e.to_string())?;
            return self.encode(&mov);
        }
        let scratch = [
            Register::RBX,
            Register::RSI,
            Register::RDI,
            Register::R8,
            Register::R9,
            Register::R10,
        ]
        .into_iter()
        .find(|&r| !uses_register(insn, r))
        .ok_or("no free scratch register")?;
        let mut moved = *insn;
        moved.set_memory_base(scratch);
        moved.set_memory_displacement64(0);
        moved.set_memory_displ_size(0);
        let slot = S2;
        let sr = scratch.number() as u8;
        dynasm!(self.ops ; .arch x64 ; gs mov QWORD [slot], Rq(sr) ; mov Rq(sr), QWORD abs as i64);
        self.encode(&moved)?;
        dynasm!(self.ops ; .arch x64 ; gs mov Rq(sr), QWORD [slot]);
        Ok(())
    }

    /// Entry check for code in writable memory: compares the block's guest bytes with the ones
    /// it was translated from and leaves through an `SmcMismatch` exit if they changed.
    /// Flag-free: `lea` + `jrcxz` on 4-byte (or 1-byte, for short blocks) chunks.
    fn smc_check(&mut self, guest: u64, bytes: &[u8]) {
        let mismatch = self.ops.new_dynamic_label();
        dynasm!(self.ops ; .arch x64 ; gs mov QWORD [S0], rcx);
        let mut chunks: Vec<(u64, u32, bool)> = Vec::new();
        if bytes.len() >= 4 {
            let mut off = 0;
            while off < bytes.len() {
                let o = off.min(bytes.len() - 4);
                let v = u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or([0; 4]));
                chunks.push((guest + o as u64, v, false));
                off += 4;
            }
        } else {
            for (i, &b) in bytes.iter().enumerate() {
                chunks.push((guest + i as u64, u32::from(b), true));
            }
        }
        for (addr, v, byte) in chunks {
            let neg = (v as i32).wrapping_neg();
            let a = addr as i64;
            if byte {
                dynasm!(self.ops ; .arch x64 ; mov rcx, QWORD a ; movzx ecx, BYTE [rcx]);
            } else {
                dynasm!(self.ops ; .arch x64 ; mov rcx, QWORD a ; mov ecx, DWORD [rcx]);
            }
            dynasm!(self.ops
                ; .arch x64
                ; lea ecx, [rcx + neg]
                ; jrcxz >same
                ; jmp =>mismatch
                ; same:
            );
        }
        let done = self.ops.new_dynamic_label();
        dynasm!(self.ops
            ; .arch x64
            ; gs mov rcx, QWORD [S0]
            ; jmp =>done
            ; =>mismatch
            ; gs mov rcx, QWORD [S0]
        );
        self.jmp_exit(ExitKind::SmcMismatch, guest);
        dynasm!(self.ops ; .arch x64 ; =>done);
    }

    /// Emits the exit stubs and returns the pending records (patch offsets resolved).
    fn stubs(&mut self) {
        let exit_id = OFF_EXIT_ID as i32;
        let exit_fn = OFF_EXIT_FN as i32;
        for i in 0..self.exits.len() {
            let label = self.exits[i].label;
            let id = (self.first_exit_id + i as u32) as i32;
            self.exits[i].stub_off = self.off();
            dynasm!(self.ops
                ; .arch x64
                ; =>label
                ; gs mov DWORD [exit_id], id
                ; gs jmp QWORD [exit_fn]
            );
        }
    }
}

fn uses_register(insn: &Instruction, r: Register) -> bool {
    let full = r.full_register();
    (0..insn.op_count())
        .any(|i| insn.op_kind(i) == OpKind::Register && insn.op_register(i).full_register() == full)
        || insn.memory_base().full_register() == full
        || insn.memory_index().full_register() == full
    // Implicit users (string ops, mul/div, cmpxchg...): stay away from all of rax..rdi's
    // implicit roles by only offering rbx/rsi/rdi/r8-r10 and checking explicit operands;
    // string instructions have no RIP-relative operand.
}

/// Translates the guest block at `guest` and records it in `cache`; returns its host address.
pub fn translate(
    cache: &mut CodeCache,
    tool: &mut dyn crate::tool::Tool,
    guest: u64,
    opts: &TranslateOptions,
    writable: &dyn Fn(u64, u64) -> bool,
) -> Result<u64, TranslateError> {
    // Most blocks are a few dozen bytes: read a little first (a page's first read is a system
    // call, `guest_mem`), all that a block may span only when the first read was too short.
    let mut buf = vec![0u8; FIRST_READ];
    let n = read_guest(guest, &mut buf);
    buf.truncate(n);
    let (mut insns, mut end) = decode_block(guest, &buf, opts);
    let decoded_to = match end {
        BlockEnd::FallThrough(next) => next,
        BlockEnd::Control => insns.last().map_or(guest, |i| i.next_ip()),
        BlockEnd::Trap { addr, .. } => addr,
    };
    if n == FIRST_READ && decoded_to - guest + READ_MARGIN > FIRST_READ as u64 {
        buf.resize(MAX_BLOCK_BYTES, 0);
        let n = read_guest(guest, &mut buf);
        buf.truncate(n);
        (insns, end) = decode_block(guest, &buf, opts);
    }
    for insn in &insns {
        if uses_gs(insn) {
            return Err(TranslateError::Unsupported {
                addr: insn.ip(),
                text: insn_text(insn),
            });
        }
    }
    let near = cache
        .reserve(guest, 4096)
        .ok_or(TranslateError::CacheFull)?;
    let code_end = insns.last().map_or(guest, |i| i.next_ip());
    let smc = code_end > guest && writable(guest, code_end);
    let exit = |factory: &mut InstructionInfoFactory| {
        exit_liveness((&insns, &end, guest, smc), opts, writable, factory)
    };
    let mut plan = crate::instrument::plan_block(&insns, tool, near, &exit);
    plan.share_scans(opts.shared_scans);
    let loop_cc = self_loop_cc(&insns, &end, guest).filter(|_| !smc);
    let shares = match (loop_cc, plan.loop_counter()) {
        (Some(_), Some(ctr)) => crate::instrument::arena::loop_shares(ctr, LOOP_COPIES - 1, near),
        _ => Vec::new(),
    };
    // Callgrind's later copies start with a lighter block-start routine instead of a share.
    let lite = loop_cc.is_some() && shares.is_empty() && plan.loop_lite_ok();
    let copies = if lite {
        LITE_LOOP_COPIES as u64
    } else {
        shares.len() as u64 + 1
    };
    // Guest bytes x8 leaves room for a self-modifying-code entry check.
    let bound = 512
        + copies
            * (plan.code_bound() + insns.iter().map(|i| i.len() as u64 * 8 + 160).sum::<u64>());
    let host = cache
        .reserve(guest, bound)
        .ok_or(TranslateError::CacheFull)?;
    let mut em = Emitter {
        ops: Asm::new(host as usize),
        host,
        exits: Vec::new(),
        first_exit_id: cache.exits.len() as u32,
        fetched: None,
    };
    let internal = |what: String| TranslateError::Internal { addr: guest, what };
    let mut guest_end = guest;
    crate::perfmap::discard();
    crate::perfmap::mark(0, "entry");
    // The indirect-branch lookup enters here, with guest rcx and rdx still in S0/S1.
    dynasm!(em.ops ; .arch x64 ; gs mov rcx, QWORD [S0] ; gs mov rdx, QWORD [S1]);
    if em.off() as u64 != IBL_ENTRY_OFFSET {
        return Err(internal(format!(
            "IBL entry prologue of {} bytes",
            em.off()
        )));
    }
    let entry = host + IBL_ENTRY_OFFSET;
    if smc {
        em.smc_check(guest, &buf[..(code_end - guest) as usize]);
    }
    let mut insn_starts = Vec::with_capacity(insns.len() * copies as usize);
    let mut flags_stashed = Vec::new();
    // A self-loop is emitted `copies` times, each copy bumping its own share of the block
    // counter and branching back into the next copy (the last into the first, the block's
    // entry): see `LOOP_COPIES`.
    let heads: Vec<DynamicLabel> = (0..copies).map(|_| em.ops.new_dynamic_label()).collect();
    for (k, &head) in heads.iter().enumerate() {
        dynasm!(em.ops ; .arch x64 ; =>head);
        if k > 0 {
            if lite {
                plan.set_loop_head(heads[0], k as u32);
            } else {
                plan.set_counter(shares[k - 1]);
            }
        }
        for (i, insn) in insns.iter().enumerate() {
            guest_end = insn.next_ip();
            insn_starts.push(((em.off() as u64 - IBL_ENTRY_OFFSET) as u32, insn.ip()));
            let bytes = &buf[(insn.ip() - guest) as usize..(insn.next_ip() - guest) as usize];
            let failed = |what: String| TranslateError::Internal {
                addr: insn.ip(),
                what: format!("{what} (`{}`)", insn_text(insn)),
            };
            crate::perfmap::mark(em.off(), "body");
            plan.emit_before(&mut em.ops, host, i).map_err(failed)?;
            em.fetched = plan.fetched();
            if plan.flags_stashed() {
                flags_stashed.push(insn_starts.len() as u32 - 1);
            }
            if plan.emit_rep(&mut em.ops, host, i, bytes).map_err(failed)? {
                continue;
            }
            match loop_cc {
                Some(cc) if copies > 1 && i + 1 == insns.len() => {
                    let next_head = if lite && k + 1 == heads.len() {
                        plan.loop_back(&mut em.ops, k as u32).map_err(failed)?
                    } else {
                        heads[(k + 1) % heads.len()]
                    };
                    em.jcc_to(cc, next_head);
                    if lite && k > 0 {
                        plan.loop_exit(&mut em.ops, k as u32).map_err(failed)?;
                    }
                    em.jmp_exit(ExitKind::Direct, insn.next_ip());
                }
                _ => emit_insn(&mut em, insn, bytes).map_err(failed)?,
            }
        }
    }
    plan.emit_block_end(&mut em.ops);
    match end {
        BlockEnd::FallThrough(next) => em.jmp_exit(ExitKind::Direct, next),
        BlockEnd::Control => {}
        BlockEnd::Trap { addr, signal, next } => {
            guest_end = guest_end.max(addr + 1);
            em.jmp_exit(ExitKind::Trap { signal, next }, addr);
        }
    }
    let body_len = em.off() as u64 - IBL_ENTRY_OFFSET;
    plan.emit_near_paths(&mut em.ops).map_err(internal)?;
    let body_end = em.off();
    plan.emit_literals(&mut em.ops);
    let parts = split::Parts {
        body_end,
        hot_len: em.off(),
    };
    crate::perfmap::mark(em.off(), "slow");
    plan.emit_slow_paths(&mut em.ops).map_err(internal)?;
    crate::perfmap::mark(em.off(), "stubs");
    em.stubs();
    let hot_len = parts.hot_len;
    let (mut code, crossing) = em
        .ops
        .finalize_with_crossing(hot_len)
        .map_err(|e| internal(format!("{e:?}")))?;
    let len = code.len() as u64;
    if len > bound {
        return Err(internal(format!(
            "block of {len} bytes exceeds its bound {bound}"
        )));
    }
    let original = opts.check_split.then(|| code.clone());
    let cold = opts
        .cold_parts
        .then(|| cache.cold_room(host, hot_len as u64, len - hot_len as u64))
        .flatten()
        .filter(|&cold| split::relocate_cold(&mut code, host, hot_len, &crossing, cold).is_some());
    if let (Some(original), Some(cold)) = (original, cold) {
        split::check_relocated(&original, &code, host, parts, cold).map_err(internal)?;
    }
    // Where byte `off` of the code as emitted lies.
    let placed =
        |off: usize| cold.map_or(host + off as u64, |c| split::placed(off, host, hot_len, c));
    let placed_len = if cold.is_some() { hot_len } else { code.len() };
    // SAFETY: `host..host+bound` was reserved in an RWX chunk for this translation and
    // `cold..cold+len-hot_len` below that chunk's cold parts (`cold_room`); no other code has
    // been placed there and nothing executes it before `insert_block` publishes it.
    unsafe {
        core::ptr::copy_nonoverlapping(code.as_ptr(), host as *mut u8, placed_len);
        if let Some(cold) = cold {
            let rest = &code[hot_len..];
            core::ptr::copy_nonoverlapping(rest.as_ptr(), cold as *mut u8, rest.len());
        }
    }
    if let Some(cold) = cold {
        cache.commit_cold(host, cold);
    }
    cache.commit(host, placed_len as u64);
    crate::perfmap::publish(code.len(), placed);
    let mut exit_ids = Vec::with_capacity(em.exits.len());
    for (i, e) in em.exits.iter().enumerate() {
        debug_assert!(
            e.patch_off.is_none_or(|o| o < hot_len),
            "exit in the cold part"
        );
        let id = cache.add_exit(ExitRecord {
            kind: e.kind,
            target: e.target,
            patch_site: e.patch_off.map_or(0, placed),
            stub: placed(e.stub_off),
            from_block: guest,
            fetched: e.fetched,
        });
        debug_assert_eq!(id, em.first_exit_id + i as u32);
        exit_ids.push(id);
    }
    if opts.trace_blocks {
        eprintln!(
            "--rgrind-- translate {guest:#x}-{guest_end:#x} ({} insns) -> {entry:#x} ({} bytes, body {body_len}{})",
            insns.len(),
            len - IBL_ENTRY_OFFSET,
            cold.map_or(String::new(), |c| format!(", out of line at {c:#x}"))
        );
    }
    cache.insert_block(Block {
        insn_starts,
        flags_stashed,
        guest_start: guest,
        guest_end,
        host: entry,
        host_len: placed_len as u64 - IBL_ENTRY_OFFSET,
        exits: exit_ids,
        incoming: Vec::new(),
        // Not past an entry check of self-modifying code, nor into a copy of a loop.
        line_entry: plan
            .line_entry()
            .filter(|_| opts.line_entries && !smc && copies == 1)
            .map(|(off, lines)| (host + off as u64, lines)),
        guest_insns: insns.len() as u32,
        tool_end: code_end,
        counted_before: plan.counted_before(),
        loop_owed: lite
            .then(|| plan.loop_owed())
            .flatten()
            .map(|(state, ir)| crate::cache::LoopOwed { state, ir }),
    });
    Ok(entry)
}

fn emit_insn(em: &mut Emitter, insn: &Instruction, bytes: &[u8]) -> Result<(), String> {
    let next = insn.next_ip();
    match insn.code() {
        Code::Syscall => {
            em.jmp_exit(ExitKind::Syscall, next);
            return Ok(());
        }
        Code::Cpuid => {
            em.jmp_exit(ExitKind::Cpuid, next);
            return Ok(());
        }
        Code::Popfq => {
            em.popfq();
            return Ok(());
        }
        Code::Pushfq => {
            em.pushfq();
            return Ok(());
        }
        _ if crate::clientreq::is_request(insn) => {
            em.jmp_exit(ExitKind::ClientRequest, next);
            return Ok(());
        }
        _ => {}
    }
    if let Some(xcr0) = crate::cpu::guest_xcr0() {
        if insn.code() == Code::Xgetbv {
            dynasm!(em.ops ; .arch x64 ; mov eax, xcr0 as i32 ; mov edx, 0);
            return Ok(());
        }
        if is_xsave_family(insn.code()) {
            return em.masked_xsave(insn, bytes, xcr0);
        }
    }
    match insn.flow_control() {
        FlowControl::Next => {
            if insn.is_ip_rel_memory_operand() {
                em.rip_relative(insn)
            } else {
                em.ops.extend(bytes.iter().copied());
                Ok(())
            }
        }
        FlowControl::UnconditionalBranch => {
            em.jmp_exit(ExitKind::Direct, insn.near_branch_target());
            Ok(())
        }
        FlowControl::ConditionalBranch => {
            let target = insn.near_branch_target();
            let cc = cc_number(insn.condition_code()).filter(|_| !is_rcx_branch(insn));
            if let Some(cc) = cc {
                em.jcc_exit(cc, target);
                em.jmp_exit(ExitKind::Direct, next);
            } else {
                // loop/loope/loopne/jrcxz/jecxz only exist with rel8: branch over a jump.
                let taken = em.ops.new_dynamic_label();
                let head = &bytes[..bytes.len() - 1];
                em.ops.extend(head.iter().copied());
                em.ops.push(5); // taken: skip the 5-byte `jmp >fall` below
                dynasm!(em.ops ; .arch x64 ; jmp >fall ; =>taken);
                // The short jmp above skips to the fall-through exit; the rel8 lands here.
                em.jmp_exit(ExitKind::Direct, target);
                dynasm!(em.ops ; .arch x64 ; fall:);
                em.jmp_exit(ExitKind::Direct, next);
                let _ = taken;
            }
            Ok(())
        }
        FlowControl::Call => {
            em.push_return_address(next, false);
            em.jmp_exit(ExitKind::Direct, insn.near_branch_target());
            Ok(())
        }
        FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            dynasm!(em.ops ; .arch x64 ; gs mov QWORD [S0], rcx ; gs mov QWORD [S1], rdx);
            em.load_target(insn)?;
            if insn.flow_control() == FlowControl::IndirectCall {
                em.push_return_address(next, true);
            }
            if let Some(expected) = got_target(insn) {
                em.expect_target(expected);
            }
            em.ibl();
            Ok(())
        }
        FlowControl::Return => {
            let pop = 8 + insn.immediate16() as i32 * i32::from(insn.op_count() > 0);
            dynasm!(em.ops
                ; .arch x64
                ; gs mov QWORD [S0], rcx
                ; gs mov QWORD [S1], rdx
                ; mov rdx, QWORD [rsp]
                ; lea rsp, [rsp + pop]
            );
            em.ibl();
            Ok(())
        }
        FlowControl::XbeginXabortXend => {
            if matches!(insn.code(), Code::Xbegin_rel16 | Code::Xbegin_rel32) {
                // A transaction that aborts at once (allowed by the architecture for any
                // reason, and what Valgrind does): EAX = abort status 0, continue at the
                // fallback address.
                dynasm!(em.ops ; .arch x64 ; mov eax, 0);
                em.jmp_exit(ExitKind::Direct, insn.near_branch_target());
            } else {
                // xend/xabort outside a transaction behave natively (#GP / no-op, or #UD
                // without RTM): run them as they are.
                em.ops.extend(bytes.iter().copied());
                em.jmp_exit(ExitKind::Direct, next);
            }
            Ok(())
        }
        _ => Err(format!("unexpected flow control {:?}", insn.flow_control())),
    }
}

/// The target an indirect jump or call through a RIP-relative slot (a PLT stub's `jmp
/// *GOT(%rip)`, `-fno-plt`'s `call *GOT(%rip)`) finds there now: a shared library's
/// functions once the dynamic linker has bound them, which they stay. The slot is read
/// again every time (the direct exit is taken only for this target), so it is a guess,
/// not an assumption; a slot that still points just past the jump (lazy binding's first
/// call) gives none.
fn got_target(insn: &Instruction) -> Option<u64> {
    if !insn.is_ip_rel_memory_operand() || insn.memory_size().size() != 8 {
        return None;
    }
    let mut slot = [0u8; 8];
    if crate::guest_mem::read(insn.ip_rel_memory_address(), &mut slot) != slot.len() {
        return None;
    }
    let target = u64::from_le_bytes(slot);
    (target != 0 && target.abs_diff(insn.next_ip()) > 16).then_some(target)
}

/// Instructions that save or restore the state components selected by EDX:EAX & XCR0.
fn is_xsave_family(code: Code) -> bool {
    matches!(
        code,
        Code::Xsave_mem
            | Code::Xsave64_mem
            | Code::Xsaveopt_mem
            | Code::Xsaveopt64_mem
            | Code::Xsavec_mem
            | Code::Xsavec64_mem
            | Code::Xrstor_mem
            | Code::Xrstor64_mem
    )
}

/// Instructions of a successor looked at for what it overwrites before reading.
const SUCCESSOR_SCAN_INSNS: usize = 6;

/// What is dead when the block `insns` (starting at `guest`; `smc`: in writable memory)
/// ends, from its direct successors' first instructions: a register both (or the one)
/// overwrite before reading it needs no saving where the block's checks borrow it, nor the
/// flags if they overwrite all six first. Nothing is known after an indirect branch, a
/// return, a system call or a trap, nor of code in writable memory (which may change under
/// the translation). A self-loop's own entry is one of its successors: iterated until
/// nothing changes.
fn exit_liveness(
    (insns, end, guest, smc): (&[Instruction], &BlockEnd, u64, bool),
    opts: &TranslateOptions,
    writable: &dyn Fn(u64, u64) -> bool,
    factory: &mut InstructionInfoFactory,
) -> ExitLiveness {
    let mut entry = |addr: u64| {
        let mut buf = [0u8; 15 * SUCCESSOR_SCAN_INSNS];
        let n = read_guest(addr, &mut buf);
        let scan = TranslateOptions {
            max_insns: SUCCESSOR_SCAN_INSNS,
            ..*opts
        };
        let (succ, _) = decode_block(addr, &buf[..n], &scan);
        let end = succ.last().map_or(addr, |i| i.next_ip());
        if succ.is_empty() || writable(addr, end) {
            return ExitLiveness::ALL_LIVE;
        }
        crate::instrument::entry_liveness(&succ, ExitLiveness::ALL_LIVE, factory)
    };
    let (targets, own): (Vec<u64>, bool) = match end {
        BlockEnd::FallThrough(next) => (vec![*next], false),
        BlockEnd::Trap { .. } => return ExitLiveness::ALL_LIVE,
        BlockEnd::Control => {
            let Some(last) = insns.last() else {
                return ExitLiveness::ALL_LIVE;
            };
            let direct = matches!(
                last.op0_kind(),
                OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
            );
            match last.flow_control() {
                FlowControl::ConditionalBranch if direct => {
                    let target = last.near_branch_target();
                    if target == guest {
                        (vec![last.next_ip()], true)
                    } else {
                        (vec![target, last.next_ip()], false)
                    }
                }
                FlowControl::UnconditionalBranch | FlowControl::Call if direct => {
                    (vec![last.near_branch_target()], false)
                }
                _ => return ExitLiveness::ALL_LIVE,
            }
        }
    };
    let mut exit = targets
        .iter()
        .map(|&t| entry(t))
        .reduce(ExitLiveness::either)
        .unwrap_or(ExitLiveness::ALL_LIVE);
    if own {
        // The block is one of its own successors: nothing is known of code that may change.
        if smc {
            return ExitLiveness::ALL_LIVE;
        }
        loop {
            let next = exit.either(crate::instrument::entry_liveness(insns, exit, factory));
            if next == exit {
                break;
            }
            exit = next;
        }
    }
    exit
}

/// Copies of a self-loop's translation when its instrumentation is the block counter and
/// cache checks (`Plan::loop_counter`): a counter bumped in memory makes each iteration wait
/// for the previous iteration's read-modify-write (store forwarding, ~7 cycles on the
/// benchmark host), which dominates tight loops; with four counters each waits on the
/// iteration four back.
const LOOP_COPIES: usize = 4;
/// Copies of a callgrind self-loop (`Plan::loop_lite`). The first runs the block-start
/// routine; the others defer their charges to the way out of the loop or the back edge of
/// the last copy, so the three counters in memory take two read-modify-writes per round
/// instead of one per iteration (callgrind, ABBA runs: matmul 400 32 0.44 -> 0.20 s, stride
/// 0.32 -> 0.15 s with 8 copies; 4 copies: 0.34 and 0.21 s; 16: no better than 8; 2 were
/// slower than no unrolling, the back edge's charge costing as much as the copy saved).
const LITE_LOOP_COPIES: usize = 8;
/// Longest self-loop (in instructions) that is unrolled.
const LOOP_MAX_INSNS: usize = 32;

/// The condition code of a block that ends in a conditional branch back to its own start
/// (`guest`), when it is short enough to unroll.
fn self_loop_cc(insns: &[Instruction], end: &BlockEnd, guest: u64) -> Option<u8> {
    let last = insns.last()?;
    let ok = matches!(end, BlockEnd::Control)
        && insns.len() <= LOOP_MAX_INSNS
        && last.flow_control() == FlowControl::ConditionalBranch
        && last.near_branch_target() == guest
        && !is_rcx_branch(last);
    if ok {
        cc_number(last.condition_code())
    } else {
        None
    }
}

fn is_rcx_branch(insn: &Instruction) -> bool {
    matches!(
        insn.code(),
        Code::Jrcxz_rel8_64
            | Code::Jecxz_rel8_64
            | Code::Loop_rel8_64_RCX
            | Code::Loop_rel8_64_ECX
            | Code::Loope_rel8_64_RCX
            | Code::Loope_rel8_64_ECX
            | Code::Loopne_rel8_64_RCX
            | Code::Loopne_rel8_64_ECX
    )
}
