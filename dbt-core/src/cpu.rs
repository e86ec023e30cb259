//! The processor the guest sees: what `cpuid` and `xgetbv` answer, and which XSAVE state
//! components guest `xsave`/`xrstor` may touch.
//!
//! Two models:
//! * [`CpuModel::Host`]: the host's own CPUID (what the program sees natively).
//! * [`CpuModel::Valgrind`]: the canned Intel CPU Valgrind 3.19 presents on an AVX2 host
//!   (VEX's `amd64g_dirtyhelper_CPUID_avx2`, an i7-4910MQ "Haswell": AVX2, BMI, FMA, no
//!   AVX-512, no XSAVEC, XCR0 = x87|SSE|AVX). glibc's ifunc choices, its cache-size tables and
//!   its lazy-binding trampoline follow from CPUID, and they change instruction counts, so the
//!   profiling tools present this one to give Valgrind's numbers. The table was read under
//!   Valgrind 3.19 with a probe executing every leaf; as in VEX, F16C, RDRAND and RDSEED are
//!   claimed only when the host has them.
//!
//! # Invariants
//! * The model is chosen once, before the guest runs ([`select`]), and never changes.
//! * Guest code runs natively, so the Valgrind model is only chosen when the host can execute
//!   everything it claims ([`valgrind_model_supported`]); otherwise the host model is used.
//! * Under the Valgrind model the guest's XCR0 is 7: translated `xgetbv` answers 7, and
//!   translated `xsave*`/`xrstor*` have their requested-feature mask cut down to it, because
//!   the guest sizes its save areas from the canned leaf 0xD (0x340 bytes) while the host's
//!   XCR0 would let the instruction write the AVX-512 components beyond that.
//!
//! Not done: the lower Valgrind models (AVX-only, SSE4.2, baseline hosts) — such a host gets
//! its own CPUID.
use std::sync::atomic::{AtomicU8, Ordering};

/// Which processor the guest is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuModel {
    /// The host's CPUID, unchanged.
    Host,
    /// Valgrind 3.19's canned AVX2 CPU.
    Valgrind,
}

static MODEL: AtomicU8 = AtomicU8::new(0);

/// The XCR0 the Valgrind model reports: x87, SSE and AVX state.
pub const VALGRIND_XCR0: u32 = 0x7;

/// Sets the model for the whole run; returns the model in force, which is `Host` when the
/// Valgrind one was asked for but the host cannot run what it claims.
pub fn select(want: CpuModel) -> CpuModel {
    let m = if want == CpuModel::Valgrind && valgrind_model_supported() {
        CpuModel::Valgrind
    } else {
        CpuModel::Host
    };
    MODEL.store(u8::from(m == CpuModel::Valgrind), Ordering::Relaxed);
    m
}

/// The model in force.
pub fn model() -> CpuModel {
    if MODEL.load(Ordering::Relaxed) == 1 {
        CpuModel::Valgrind
    } else {
        CpuModel::Host
    }
}

/// The guest's XCR0 when it differs from the host's (Valgrind model), for `xgetbv` and the
/// XSAVE masks.
pub fn guest_xcr0() -> Option<u32> {
    (model() == CpuModel::Valgrind).then_some(VALGRIND_XCR0)
}

fn host(leaf: u32, sub: u32) -> [u32; 4] {
    let r = core::arch::x86_64::__cpuid_count(leaf, sub);
    [r.eax, r.ebx, r.ecx, r.edx]
}

// Leaf 1 ECX: SSE3, PCLMULQDQ, SSSE3, FMA, CX16, SSE4.1, SSE4.2, MOVBE, POPCNT, AES, XSAVE,
// OSXSAVE, AVX; leaf 7 EBX: BMI1, AVX2, BMI2; 0x80000001: LAHF, LZCNT / SYSCALL, RDTSCP.
// The model also claims ERMS, which is not required: it only says `rep movsb`/`stosb` are
// fast, and they run on every x86-64 (an AMD EPYC host without it would otherwise show its
// own CPUID, and glibc then takes other paths than under Valgrind).
const NEED_1_ECX: u32 = (1 << 0)
    | (1 << 1)
    | (1 << 9)
    | (1 << 12)
    | (1 << 13)
    | (1 << 19)
    | (1 << 20)
    | (1 << 22)
    | (1 << 23)
    | (1 << 25)
    | (1 << 26)
    | (1 << 27)
    | (1 << 28);
const NEED_7_EBX: u32 = (1 << 3) | (1 << 5) | (1 << 8);
const NEED_X1_ECX: u32 = (1 << 0) | (1 << 5);
const NEED_X1_EDX: u32 = (1 << 11) | (1 << 27);

/// Whether every instruction set the Valgrind model claims runs on this host (guest code is
/// executed natively), and the OS enables the AVX state.
pub fn valgrind_model_supported() -> bool {
    let max = host(0, 0)[0];
    let max_ext = host(0x8000_0000, 0)[0];
    if max < 0xd || max_ext < 0x8000_0001 {
        return false;
    }
    let l1 = host(1, 0);
    let l7 = host(7, 0);
    let x1 = host(0x8000_0001, 0);
    if l1[2] & NEED_1_ECX != NEED_1_ECX
        || l7[1] & NEED_7_EBX != NEED_7_EBX
        || x1[2] & NEED_X1_ECX != NEED_X1_ECX
        || x1[3] & NEED_X1_EDX != NEED_X1_EDX
    {
        return false;
    }
    // SAFETY: OSXSAVE is set (checked above), so xgetbv with ECX=0 is defined.
    let xcr0 = unsafe { core::arch::x86_64::_xgetbv(0) };
    xcr0 & 0x7 == 0x7
}

/// What `cpuid` with EAX=`leaf`, ECX=`sub` returns to the guest.
pub fn cpuid(leaf: u32, sub: u32) -> [u32; 4] {
    match model() {
        CpuModel::Host => host(leaf, sub),
        CpuModel::Valgrind => valgrind_cpuid(leaf, sub),
    }
}

/// Valgrind 3.19's `amd64g_dirtyhelper_CPUID_avx2`, as observed.
fn valgrind_cpuid(leaf: u32, sub: u32) -> [u32; 4] {
    // Leaves past the highest one answer as the highest basic leaf does (Intel behaviour).
    const TOP: [u32; 4] = [0x0000_0007, 0x0000_0340, 0x0000_0340, 0x0000_0000];
    match leaf {
        0x0 => [0x0000_000d, 0x756e_6547, 0x6c65_746e, 0x4965_6e69],
        0x1 => {
            let host_ecx = host(1, 0)[2];
            let ecx = 0x1ffa_fbff | (host_ecx & ((1 << 29) | (1 << 30)));
            [0x0003_06c3, 0x0210_0800, ecx, 0xbfeb_fbff]
        }
        0x2 => [0x7603_6301, 0x00f0_b6ff, 0x0000_0000, 0x00c1_0000],
        0x4 => match sub {
            0 => [0x1c00_4121, 0x01c0_003f, 0x0000_003f, 0x0000_0000],
            1 => [0x1c00_4122, 0x01c0_003f, 0x0000_003f, 0x0000_0000],
            2 => [0x1c00_4143, 0x01c0_003f, 0x0000_01ff, 0x0000_0000],
            3 => [0x1c03_c163, 0x03c0_003f, 0x0000_1fff, 0x0000_0006],
            _ => [0; 4],
        },
        0x5 => [0x0000_0040, 0x0000_0040, 0x0000_0003, 0x0004_2120],
        0x6 => [0x0000_0077, 0x0000_0002, 0x0000_0009, 0x0000_0000],
        0x7 => match sub {
            0 => {
                let rdseed = host(7, 0)[1] & (1 << 18);
                [0, 0x0000_27aa | rdseed, 0, 0]
            }
            _ => [0; 4],
        },
        0xa => [0x0730_0803, 0x0000_0000, 0x0000_0000, 0x0000_0603],
        0xb => match sub {
            0 => [0x0000_0001, 0x0000_0002, 0x0000_0100, 0x0000_0002],
            1 => [0x0000_0004, 0x0000_0008, 0x0000_0201, 0x0000_0002],
            s => [0, 0, s & 0xff, 0x0000_0002],
        },
        0xd => match sub {
            0 => TOP,
            2 => [0x0000_0100, 0x0000_0240, 0x0000_0000, 0x0000_0000],
            _ => [0; 4],
        },
        0x3 | 0x8 | 0x9 | 0xc => [0; 4],
        0x8000_0000 => [0x8000_0008, 0, 0, 0],
        0x8000_0001 => [0, 0, 0x0000_0021, 0x2c10_0800],
        0x8000_0002 => [0x6574_6e49, 0x2952_286c, 0x726f_4320, 0x4d54_2865],
        0x8000_0003 => [0x3769_2029, 0x3139_342d, 0x2051_4d30, 0x2055_5043],
        0x8000_0004 => [0x2e32_2040, 0x4847_3039, 0x0000_007a, 0x0000_0000],
        0x8000_0005 => [0; 4],
        0x8000_0006 => [0, 0, 0x0100_6040, 0],
        0x8000_0007 => [0, 0, 0, 0x0000_0100],
        0x8000_0008 => [0x0000_3027, 0, 0, 0],
        _ => TOP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valgrind_model_claims_haswell_without_avx512() {
        let l1 = valgrind_cpuid(1, 0);
        assert_eq!(l1[0], 0x306c3);
        assert_eq!(l1[2] & 0x1fff_ffff, 0x1ffa_fbff);
        let l7 = valgrind_cpuid(7, 0);
        assert_eq!(l7[1] & !(1 << 18), 0x27aa, "AVX2/BMI, no AVX512F (bit 16)");
        assert_eq!(valgrind_cpuid(0xd, 0), [7, 0x340, 0x340, 0]);
        assert_eq!(valgrind_cpuid(0xd, 1), [0; 4], "no XSAVEOPT/XSAVEC");
        let brand: Vec<u8> = (0x8000_0002u32..=0x8000_0004)
            .flat_map(|l| valgrind_cpuid(l, 0))
            .flat_map(u32::to_le_bytes)
            .take_while(|&b| b != 0)
            .collect();
        assert_eq!(
            String::from_utf8(brand).unwrap(),
            "Intel(R) Core(TM) i7-4910MQ CPU @ 2.90GHz"
        );
        assert_eq!(valgrind_cpuid(0x14, 3), valgrind_cpuid(0xd, 0));
        assert_eq!(valgrind_cpuid(0x8000_001d, 0), valgrind_cpuid(0xd, 0));
    }
}
