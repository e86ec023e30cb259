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
//! * Core requests are answered here (RUNNING_ON_VALGRIND → 1, DISCARD_TRANSLATIONS,
//!   NON_SIMD_CALL0..3, PRINTF and its variants, STACK_REGISTER, MAP_IP_TO_SRCLOC); every
//!   other request goes to the tool, whose default answer leaves rdx unchanged.
//!
//! Not handled: Memcheck's and the other tools' requests (their defaults); the other
//! markers (`xchg rcx,rcx` NRADDR, `xchg rdx,rdx` call-noredir, `xchg rdi,rdi` IR
//! injection) run natively as the no-ops they are.
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
/// `VALGRIND_NON_SIMD_CALL0..3`: `fn(tid, arg1..)` run on the real CPU.
const CLIENT_CALL0: u64 = 0x1101;
const CLIENT_CALL3: u64 = 0x1104;
/// `VALGRIND_PRINTF` and friends: a format and (a pointer to) its `va_list`.
const PRINTF: u64 = 0x1401;
const PRINTF_BACKTRACE: u64 = 0x1402;
const PRINTF_VALIST_BY_REF: u64 = 0x1403;
const PRINTF_BACKTRACE_VALIST_BY_REF: u64 = 0x1404;
const STACK_REGISTER: u64 = 0x1501;
/// `VALGRIND_MAP_IP_TO_SRCLOC(addr, buf64)`.
const MAP_IP_TO_SRCLOC: u64 = 0x1701;

/// The last id `VALGRIND_STACK_REGISTER` handed out (Valgrind's start at 1).
static STACK_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Where `VALGRIND_PRINTF`'s text goes (the launcher's log), set once at start.
static CLIENT_OUTPUT: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets where the guest's `VALGRIND_PRINTF` text goes (`dbt_core::tool::set_client_output`).
pub fn set_client_output(sink: fn(&str)) {
    let _ = CLIENT_OUTPUT.set(sink);
}

/// The source file name (without its directory) and line of a guest code address.
type SourceLocator = fn(u64) -> Option<(String, u32)>;

/// For `VALGRIND_MAP_IP_TO_SRCLOC` (the launcher's symboliser), set once at start.
static SOURCE_LOCATOR: std::sync::OnceLock<SourceLocator> = std::sync::OnceLock::new();

/// Prints the guest's call stack from (rip, rsp, rbp) for `VALGRIND_PRINTF_BACKTRACE` (the
/// launcher's unwinder and log), set once at start.
static BACKTRACE_PRINTER: std::sync::OnceLock<fn(u64, u64, u64)> = std::sync::OnceLock::new();

/// Sets how `VALGRIND_PRINTF_BACKTRACE` prints the call stack
/// (`dbt_core::tool::set_backtrace_printer`).
pub fn set_backtrace_printer(print: fn(u64, u64, u64)) {
    let _ = BACKTRACE_PRINTER.set(print);
}

/// Sets how `VALGRIND_MAP_IP_TO_SRCLOC` finds a source location
/// (`dbt_core::tool::set_source_locator`).
pub fn set_source_locator(locate: SourceLocator) {
    let _ = SOURCE_LOCATOR.set(locate);
}

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
        CLIENT_CALL0..=CLIENT_CALL3 => {
            ctx.gpr[reg::RDX] = client_call(ctx, &args);
        }
        PRINTF | PRINTF_VALIST_BY_REF => {
            ctx.gpr[reg::RDX] = client_printf(args[1], args[2]);
        }
        PRINTF_BACKTRACE | PRINTF_BACKTRACE_VALIST_BY_REF => {
            ctx.gpr[reg::RDX] = client_printf(args[1], args[2]);
            if let Some(print) = BACKTRACE_PRINTER.get() {
                // Valgrind's innermost frame is the instruction after the request.
                print(ctx.rip, ctx.gpr[reg::RSP], ctx.gpr[reg::RBP]);
            }
        }
        STACK_REGISTER => {
            ctx.gpr[reg::RDX] = STACK_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        }
        MAP_IP_TO_SRCLOC => {
            let found = SOURCE_LOCATOR.get().and_then(|locate| locate(args[1]));
            crate::guest_mem::write(args[2], &source_location_text(found));
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

/// The 64 bytes `VALGRIND_MAP_IP_TO_SRCLOC` writes, as Valgrind: `file:line`, the file name
/// cut to 49 bytes, zero-padded; all zero when the location is unknown.
fn source_location_text(found: Option<(String, u32)>) -> [u8; 64] {
    let mut buf = [0u8; 64];
    if let Some((file, line)) = found {
        let name = &file.as_bytes()[..file.len().min(49)];
        let text = [name, format!(":{line}").as_bytes()].concat();
        buf[..text.len()].copy_from_slice(&text);
    }
    buf
}

/// `VALGRIND_NON_SIMD_CALLn(f, ...)`: calls `f(tid, arg1, arg2, arg3)` here, on the real
/// CPU and rgrind's stack, as Valgrind does (its documentation warns the function must not
/// depend on the guest's thread state). `tid` is Valgrind's 1-based thread number as far as
/// rgrind keeps one: the thread's place among the live ones.
fn client_call(ctx: &ThreadContext, args: &[u64; 6]) -> u64 {
    let tid = crate::thread::list_guard()
        .iter()
        .position(|&c| c == ctx as *const _ as usize)
        .map_or(1, |i| i as u64 + 1);
    if args[1] == 0 {
        return 0;
    }
    // SAFETY: the guest asked for exactly this call of its own function with these
    // arguments; under Valgrind it runs natively the same way.
    unsafe {
        let f: extern "C" fn(u64, u64, u64, u64) -> u64 = std::mem::transmute(args[1]);
        f(tid, args[2], args[3], args[4])
    }
}

extern "C" {
    /// glibc's, with the `va_list` as the pointer an x86-64 `va_list` argument is.
    fn vsnprintf(
        buf: *mut libc::c_char,
        size: usize,
        format: *const libc::c_char,
        ap: *mut libc::c_void,
    ) -> libc::c_int;
}

/// `VALGRIND_PRINTF(format, ...)`: formats with the guest's own `va_list` (x86-64: a pointer
/// to its state, in the guest's memory, which is ours) and hands the text to the log.
/// Returns the length, as Valgrind does. The backtrace variants print the text only.
fn client_printf(format: u64, va_list: u64) -> u64 {
    if format == 0 || va_list == 0 {
        return 0;
    }
    let mut buf = vec![0u8; 8192];
    // SAFETY: `format` and `va_list` are the guest's (the same address space); vsnprintf
    // writes at most `buf.len()` bytes, NUL included.
    let n = unsafe {
        vsnprintf(
            buf.as_mut_ptr().cast(),
            buf.len(),
            format as *const libc::c_char,
            va_list as *mut libc::c_void,
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return 0;
    };
    let text = String::from_utf8_lossy(&buf[..n.min(buf.len() - 1)]);
    if let Some(sink) = CLIENT_OUTPUT.get() {
        sink(&text);
    }
    n as u64
}
