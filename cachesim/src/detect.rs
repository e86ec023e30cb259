//! Host cache detection from CPUID, exactly as Valgrind 3.19 does it (`coregrind/m_cache.c`
//! for the CPUID decoding, `cachegrind/cg_arch.c` `configure_caches` /
//! `VG_(post_clo_init_configure_caches)` for choosing I1/D1/LL, the fallbacks, the warnings and
//! the LL tweak), so the same machine yields the geometry Valgrind prints in its `desc:` lines.
//!
//! # Pipeline
//! 1. `cpuid(0)`: max leaf and vendor. `GenuineIntel` -> leaf 2 descriptor bytes (descriptor
//!    `0xFF` -> enumerate leaf 4); `AuthenticAMD` -> leaves 0x80000005/0x80000006 (never
//!    0x8000001D, so Zen's L3 associativity code 9 decodes as direct-mapped); `CentaurHauls`
//!    -> fixed VIA values; anything else fails.
//! 2. Sizes (KiB) are scaled to bytes; the cache list must be "sensible" (one cache per kind
//!    and level, no unified cache beside split ones, no gaps in levels) or detection fails.
//! 3. I1 = instruction cache at level 1, D1 = data cache at level 1, LL = unified cache at the
//!    highest level (warning if that level is > 2). Missing any -> the defaults
//!    65536,2,64 / 65536,2,64 / 262144,8,64 and a warning.
//! 4. The LL gets [`tweak_ll`].
//!
//! # Invariants
//! * Detection is a pure function of the [`CpuidSource`]; [`detect_host`] uses the real CPUID
//!   of the host (not a guest's synthetic one), as Valgrind does.
//! * Warning texts are Valgrind's, without the `--PID-- ` prefix, in Valgrind's order.
//!
//! # Not done here / deliberate differences
//! * Valgrind panics on IA-64 descriptor bytes and would loop forever on a CPU whose leaf 4
//!   never ends; we treat the first as a failed detection and stop the second after 256
//!   sub-leaves.
//! * Valgrind's `-d` debug-log lines are not produced.

use crate::geometry::{cache_img, tweak_ll, CacheGeometry, CacheLevel, CheckError};

/// Something that answers CPUID queries: `[eax, ebx, ecx, edx]` for `(leaf, subleaf)`.
/// Tests use canned tables; [`HostCpuid`] executes the instruction.
pub trait CpuidSource {
    /// Executes (or looks up) CPUID.
    fn cpuid(&self, leaf: u32, subleaf: u32) -> [u32; 4];
}

/// The host CPU's real CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCpuid;

impl CpuidSource for HostCpuid {
    fn cpuid(&self, leaf: u32, subleaf: u32) -> [u32; 4] {
        crate::raw::host_cpuid(leaf, subleaf)
    }
}

/// The two lines Valgrind prints when it falls back to default caches (unless all three
/// caches were given on the command line).
pub const DEFAULTS_WARNING: [&str; 2] = [
    "Warning: Cannot auto-detect cache config, using defaults.",
    "         Run with -v to see.",
];

/// The x86/amd64 defaults used when detection fails.
pub const DEFAULT_I1: CacheGeometry = CacheGeometry::new(65536, 2, 64);
/// Default D1.
pub const DEFAULT_D1: CacheGeometry = CacheGeometry::new(65536, 2, 64);
/// Default LL.
pub const DEFAULT_LL: CacheGeometry = CacheGeometry::new(262144, 8, 64);

/// The auto-detected configuration, before command-line overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectedGeometry {
    /// I1 as Valgrind would simulate it without `--I1`.
    pub i1: CacheGeometry,
    /// D1 without `--D1`.
    pub d1: CacheGeometry,
    /// LL without `--LL`, after the power-of-two tweak.
    pub ll: CacheGeometry,
    /// Lines Valgrind prints with the `--PID-- ` prefix for a run without cache options
    /// (e.g. `warning: L3 cache found, using its data for the LL simulation.`), in order.
    pub warnings: Vec<String>,
    /// Detection failed and the defaults are in use (the warnings then end with
    /// [`DEFAULTS_WARNING`], which [`DetectedGeometry::resolve`] drops when all three caches
    /// are overridden, as Valgrind does).
    pub used_defaults: bool,
}

/// Geometries given on the command line (`--I1`, `--D1`, `--LL`), already parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheOverrides {
    /// `--I1=`.
    pub i1: Option<CacheGeometry>,
    /// `--D1=`.
    pub d1: Option<CacheGeometry>,
    /// `--LL=` / `--L2=`.
    pub ll: Option<CacheGeometry>,
}

/// The configuration to simulate, with everything Valgrind prints while choosing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedCaches {
    /// I1 to simulate.
    pub i1: CacheGeometry,
    /// D1 to simulate.
    pub d1: CacheGeometry,
    /// LL to simulate.
    pub ll: CacheGeometry,
    /// `--PID-- ` lines, printed first.
    pub warnings: Vec<String>,
    /// `==PID== ` lines printed after the warnings (an unsupported auto-detected cache that
    /// the command line overrides).
    pub messages: Vec<String>,
}

/// An auto-detected cache fails Valgrind's checks and was not overridden: Valgrind prints
/// `messages` (with `==PID== `) after `warnings` (with `--PID-- `) and aborts. A limit of the
/// simulator, not a bug in the caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Auto-detected {level} cache configuration not supported: {check}")]
pub struct UnsupportedCache {
    /// The offending level.
    pub level: CacheLevel,
    /// Its detected geometry.
    pub geometry: CacheGeometry,
    /// The failed check.
    pub check: CheckError,
    /// `--PID-- ` lines printed first.
    pub warnings: Vec<String>,
    /// `==PID== ` lines, ending with `Bypass this message by using option --LL=...`.
    pub messages: Vec<String>,
}

impl DetectedGeometry {
    /// Applies command-line overrides the way `VG_(post_clo_init_configure_caches)` does:
    /// every detected cache is checked (a failing one that is overridden only produces a
    /// message; one that is not is an error), then the overrides replace the detected values.
    /// The defaults warning is dropped when all three caches are given.
    pub fn resolve(&self, overrides: &CacheOverrides) -> Result<ResolvedCaches, UnsupportedCache> {
        let all_given = overrides.i1.is_some() && overrides.d1.is_some() && overrides.ll.is_some();
        let warnings: Vec<String> = if self.used_defaults && all_given {
            self.warnings
                .iter()
                .filter(|w| !DEFAULTS_WARNING.contains(&w.as_str()))
                .cloned()
                .collect()
        } else {
            self.warnings.clone()
        };
        let mut messages = Vec::new();
        for (level, detected, given) in [
            (CacheLevel::I1, self.i1, overrides.i1),
            (CacheLevel::D1, self.d1, overrides.d1),
            (CacheLevel::LL, self.ll, overrides.ll),
        ] {
            if let Err(check) = detected.check() {
                messages.push(format!(
                    "Auto-detected {level} cache configuration not supported: {check}"
                ));
                messages.push(cache_img(level, &detected));
                if given.is_none() {
                    messages.push(
                        "As it probably should be supported, please report a bug!".to_string(),
                    );
                    messages.push(format!("Bypass this message by using option --{level}=..."));
                    return Err(UnsupportedCache {
                        level,
                        geometry: detected,
                        check,
                        warnings,
                        messages,
                    });
                }
            }
        }
        Ok(ResolvedCaches {
            i1: overrides.i1.unwrap_or(self.i1),
            d1: overrides.d1.unwrap_or(self.d1),
            ll: overrides.ll.unwrap_or(self.ll),
            warnings,
            messages,
        })
    }
}

/// Detects the host's caches from its real CPUID, as Valgrind 3.19 on this machine would.
pub fn detect_host() -> DetectedGeometry {
    detect_with(&HostCpuid)
}

/// Detects caches from any CPUID source (see [`detect_host`]).
pub fn detect_with(src: &impl CpuidSource) -> DetectedGeometry {
    let mut warnings = Vec::new();
    let chosen = caches_from_cpuid(src)
        .filter(HwInfo::is_sensible)
        .and_then(|info| configure(&info, &mut warnings));
    let (i1, d1, ll, used_defaults) = match chosen {
        Some((i1, d1, ll)) => (i1, d1, ll, false),
        None => {
            warnings.extend(DEFAULTS_WARNING.iter().map(|s| s.to_string()));
            (DEFAULT_I1, DEFAULT_D1, DEFAULT_LL, true)
        }
    };
    let (ll, tweak_warnings) = tweak_ll(ll);
    warnings.extend(tweak_warnings);
    DetectedGeometry {
        i1,
        d1,
        ll,
        warnings,
        used_defaults,
    }
}

/// `configure_caches` for a sensible cache list: pick I1, D1 and the top-level unified cache,
/// emitting Valgrind's warnings. `None` when one of them is missing (the caller then falls
/// back to the defaults).
fn configure(
    info: &HwInfo,
    warnings: &mut Vec<String>,
) -> Option<(CacheGeometry, CacheGeometry, CacheGeometry)> {
    let i1 = info.locate(Kind::Insn, 1);
    let d1 = info.locate(Kind::Data, 1);
    let ll = info.locate(Kind::Unified, info.num_levels);
    if !info.caches.is_empty() && ll.is_none() {
        warnings.push("warning: L2 cache not installed, ignore LL results.".to_string());
    }
    if ll.is_some() && info.num_levels > 2 {
        warnings.push(format!(
            "warning: L{} cache found, using its data for the LL simulation.",
            info.num_levels
        ));
    }
    if let (Some(i1), Some(d1), Some(ll)) = (i1, d1, ll) {
        let i1g = if i1.trace {
            let adjusted = if i1.size == 12 * 1024 || i1.size == 16 * 1024 {
                16 * 1024
            } else {
                32 * 1024
            };
            let guessed_line = 32;
            warnings.push(format!(
                "warning: Pentium 4 with {} KB micro-op instruction trace cache",
                i1.size / 1024
            ));
            warnings.push(format!(
                "         Simulating a {} KB I-cache with {} B lines",
                adjusted / 1024,
                guessed_line
            ));
            CacheGeometry::new(adjusted, i1.assoc, guessed_line)
        } else {
            i1.geometry()
        };
        return Some((i1g, d1.geometry(), ll.geometry()));
    }
    None
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Insn,
    Data,
    Unified,
}

/// One `VexCache`: sizes in KiB until [`caches_from_cpuid`] scales them to bytes.
#[derive(Clone, Copy, Debug)]
struct HwCache {
    kind: Kind,
    level: u32,
    size: u32,
    line: u32,
    assoc: u32,
    trace: bool,
}

impl HwCache {
    fn geometry(&self) -> CacheGeometry {
        CacheGeometry::new(self.size, self.assoc, self.line)
    }
}

/// `VexCacheInfo`.
#[derive(Clone, Debug, Default)]
struct HwInfo {
    num_levels: u32,
    caches: Vec<HwCache>,
}

impl HwInfo {
    /// `add_cache`: append and raise `num_levels`.
    fn add(&mut self, kind: Kind, level: u32, size_kb: u32, assoc: u32, line: u32) {
        self.num_levels = self.num_levels.max(level);
        self.caches.push(HwCache {
            kind,
            level,
            size: size_kb,
            line,
            assoc,
            trace: false,
        });
    }

    /// `locate_cache`: the first cache of that kind and level.
    fn locate(&self, kind: Kind, level: u32) -> Option<HwCache> {
        self.caches
            .iter()
            .find(|c| c.kind == kind && c.level == level)
            .copied()
    }

    /// `cache_info_is_sensible`.
    fn is_sensible(&self) -> bool {
        let mut sensible = true;
        for level in 1..=self.num_levels {
            let count = |k| {
                self.caches
                    .iter()
                    .filter(|c| c.level == level && c.kind == k)
                    .count()
            };
            let (ni, nd, nu) = (count(Kind::Insn), count(Kind::Data), count(Kind::Unified));
            if ni == 0 && nd == 0 && nu == 0 {
                sensible = false;
            }
            if ni > 1 || nd > 1 || nu > 1 {
                sensible = false;
            }
            if nu != 0 && (ni > 0 || nd > 0) {
                sensible = false;
            }
        }
        for level in 2..=self.num_levels {
            if !self.caches.iter().any(|c| c.level == level - 1) {
                sensible = false;
            }
        }
        sensible
    }
}

/// `get_caches_from_CPUID`: vendor dispatch, then KiB -> bytes. `None` = detection failed.
fn caches_from_cpuid(src: &impl CpuidSource) -> Option<HwInfo> {
    let [max_leaf, ebx, ecx, edx] = src.cpuid(0, 0);
    if max_leaf == 0 {
        return None;
    }
    let mut vendor = [0u8; 12];
    vendor[0..4].copy_from_slice(&ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&edx.to_le_bytes());
    vendor[8..12].copy_from_slice(&ecx.to_le_bytes());
    let mut info = match &vendor {
        b"GenuineIntel" => intel_cache_info(src, max_leaf)?,
        b"AuthenticAMD" => amd_cache_info(src)?,
        b"CentaurHauls" => {
            // "Total kludge. Pretend to be a VIA Nehemiah."
            let mut info = HwInfo {
                num_levels: 2,
                caches: Vec::new(),
            };
            info.caches.push(hw(Kind::Data, 1, 64, 16, 16));
            info.caches.push(hw(Kind::Insn, 1, 64, 4, 16));
            info.caches.push(hw(Kind::Unified, 2, 64, 16, 16));
            info
        }
        _ => return None,
    };
    for c in &mut info.caches {
        c.size = c.size.wrapping_mul(1024);
    }
    Some(info)
}

fn hw(kind: Kind, level: u32, size_kb: u32, assoc: u32, line: u32) -> HwCache {
    HwCache {
        kind,
        level,
        size: size_kb,
        line,
        assoc,
        trace: false,
    }
}

fn regs_to_bytes(regs: [u32; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (chunk, r) in b.chunks_exact_mut(4).zip(regs) {
        chunk.copy_from_slice(&r.to_le_bytes());
    }
    b
}

fn word(info: &[u8; 16], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&info[at..at + 4]);
    u32::from_le_bytes(w)
}

/// `Intel_cache_info`: CPUID(2) descriptor bytes, with descriptor 0xFF meaning "enumerate
/// CPUID(4)". As in Valgrind, the leaf-4 loop reuses the descriptor buffer, so descriptor
/// bytes after an 0xFF are read from the last (all-terminating) leaf-4 result.
fn intel_cache_info(src: &impl CpuidSource, max_leaf: u32) -> Option<HwInfo> {
    use Kind::{Data as D, Insn as I, Unified as U};
    if max_leaf < 2 {
        return None;
    }
    let eax1 = src.cpuid(1, 0)[0];
    let family = (((eax1 >> 20) & 0xff) << 4) + ((eax1 >> 8) & 0xf);
    let model = (((eax1 >> 16) & 0xf) << 4) + ((eax1 >> 4) & 0xf);

    let mut info = regs_to_bytes(src.cpuid(2, 0));
    // `trials = info[0] - 1` in Int arithmetic.
    if i32::from(info[0]) - 1 != 0 {
        return None;
    }
    info[0] = 0;

    let mut ci = HwInfo::default();
    for i in 0..16 {
        let mut add = |kind, level, size, assoc, line| ci.add(kind, level, size, assoc, line);
        match info[i] {
            0x00 => {}
            // TLB info: ignored.
            0x01..=0x05
            | 0x0b
            | 0x4f
            | 0x50
            | 0x51
            | 0x52
            | 0x55
            | 0x56
            | 0x57
            | 0x59
            | 0x5a..=0x5d
            | 0x76
            | 0xb0..=0xb4
            | 0xba
            | 0xc0
            | 0xca => {}

            0x06 => add(I, 1, 8, 4, 32),
            0x08 => add(I, 1, 16, 4, 32),
            0x09 => add(I, 1, 32, 4, 64),
            0x30 => add(I, 1, 32, 8, 64),

            0x0a => add(D, 1, 8, 2, 32),
            0x0c => add(D, 1, 16, 4, 32),
            0x0d => add(D, 1, 16, 4, 64),
            0x0e => add(D, 1, 24, 6, 64),
            0x2c => add(D, 1, 32, 8, 64),

            // IA-64: Valgrind panics ("IA-64 cache detected?!"); we fail detection.
            0x10 | 0x15 | 0x1a | 0x88 | 0x89 | 0x8a | 0x8d | 0x90 | 0x96 | 0x9b => return None,

            0x22 => add(U, 3, 512, 4, 64),
            0x23 => add(U, 3, 1024, 8, 64),
            0x25 => add(U, 3, 2048, 8, 64),
            0x29 => add(U, 3, 4096, 8, 64),
            0x46 => add(U, 3, 4096, 4, 64),
            0x47 => add(U, 3, 8192, 8, 64),
            0x4a => add(U, 3, 6144, 12, 64),
            0x4b => add(U, 3, 8192, 16, 64),
            0x4c => add(U, 3, 12288, 12, 64),
            0x4d => add(U, 3, 16384, 16, 64),
            0xd0 => add(U, 3, 512, 4, 64),
            0xd1 => add(U, 3, 1024, 4, 64),
            0xd2 => add(U, 3, 2048, 4, 64),
            0xd6 => add(U, 3, 1024, 8, 64),
            0xd7 => add(U, 3, 2048, 8, 64),
            0xd8 => add(U, 3, 4096, 8, 64),
            0xdc => add(U, 3, 1536, 12, 64),
            0xdd => add(U, 3, 3072, 12, 64),
            0xde => add(U, 3, 6144, 12, 64),
            0xe2 => add(U, 3, 2048, 16, 64),
            0xe3 => add(U, 3, 4096, 16, 64),
            0xe4 => add(U, 3, 8192, 16, 64),
            0xea => add(U, 3, 12288, 24, 64),
            0xeb => add(U, 3, 18432, 24, 64),
            0xec => add(U, 3, 24576, 24, 64),

            0x21 => add(U, 2, 256, 8, 64),
            0x39 => add(U, 2, 128, 4, 64),
            0x3c => add(U, 2, 256, 4, 64),

            // "no L2" (P6) or "no L3" (P4): ignored.
            0x40 => {}

            0x41 => add(U, 2, 128, 4, 32),
            0x42 => add(U, 2, 256, 4, 32),
            0x43 => add(U, 2, 512, 4, 32),
            0x44 => add(U, 2, 1024, 4, 32),
            0x45 => add(U, 2, 2048, 4, 32),
            0x48 => add(U, 2, 3072, 12, 64),
            0x4e => add(U, 2, 6144, 24, 64),
            0x49 => {
                if family == 15 && model == 6 {
                    // Xeon MP (family F, model 6): this is the L3.
                    add(U, 3, 4096, 16, 64)
                } else {
                    add(U, 2, 4096, 16, 64)
                }
            }

            0x60 => add(D, 1, 16, 8, 64),
            0x66 => add(D, 1, 8, 4, 64),
            0x67 => add(D, 1, 16, 4, 64),
            0x68 => add(D, 1, 32, 4, 64),

            // P4 trace caches: size in K micro-ops, line size 0, flagged.
            0x70..=0x72 => {
                let size = match info[i] {
                    0x70 => 12,
                    0x71 => 16,
                    _ => 32,
                };
                ci.add(I, 1, size, 8, 0);
                if let Some(last) = ci.caches.last_mut() {
                    last.trace = true;
                }
            }

            0x78 => add(U, 2, 1024, 4, 64),
            0x79 => add(U, 2, 128, 8, 64),
            0x7a => add(U, 2, 256, 8, 64),
            0x7b => add(U, 2, 512, 8, 64),
            0x7c => add(U, 2, 1024, 8, 64),
            0x7d => add(U, 2, 2048, 8, 64),
            0x7e => add(U, 2, 256, 8, 128),
            0x7f => add(U, 2, 512, 2, 64),
            0x80 => add(U, 2, 512, 8, 64),
            0x81 => add(U, 2, 128, 8, 32),
            0x82 => add(U, 2, 256, 8, 32),
            0x83 => add(U, 2, 512, 8, 32),
            0x84 => add(U, 2, 1024, 8, 32),
            0x85 => add(U, 2, 2048, 8, 32),
            0x86 => add(U, 2, 512, 4, 64),
            0x87 => add(U, 2, 1024, 8, 64),

            // Prefetch information: ignored.
            0xf0 | 0xf1 => {}

            0xff => {
                let mut sub = 0;
                info = regs_to_bytes(src.cpuid(4, sub));
                while info[0] & 0x1f != 0 && sub < 256 {
                    let ebx = word(&info, 4);
                    let assoc = ((ebx >> 22) & 0x3ff) + 1;
                    let parts = ((ebx >> 12) & 0x3ff) + 1;
                    let line = (ebx & 0x7ff) + 1;
                    let sets = word(&info, 8).wrapping_add(1);
                    let size = assoc
                        .wrapping_mul(parts)
                        .wrapping_mul(line)
                        .wrapping_mul(sets)
                        / 1024;
                    let kind = match info[0] & 0x1f {
                        1 => Some(D),
                        2 => Some(I),
                        3 => Some(U),
                        _ => None, // "cache of unknown type ignored"
                    };
                    let level = u32::from((info[0] & 0xe0) >> 5);
                    if let (Some(kind), 1..=3) = (kind, level) {
                        ci.add(kind, level, size, assoc, line);
                    }
                    sub += 1;
                    info = regs_to_bytes(src.cpuid(4, sub));
                }
            }

            // "Unknown Intel cache config value": ignored.
            _ => {}
        }
    }
    Some(ci)
}

/// `decode_AMD_cache_L2_L3_assoc`.
fn amd_l2_l3_assoc(bits: u32) -> u32 {
    match bits & 0xf {
        1 => 1,
        2 => 2,
        4 => 4,
        6 => 8,
        8 => 16,
        0xa => 32,
        0xb => 48,
        0xc => 64,
        0xd => 96,
        0xe => 128,
        // 0xF (fully associative), 0 (disabled), 9 ("see leaf 0x8000001D" on Zen) and the
        // rest: "direct-mapped as a safe but suboptimal result".
        _ => 1,
    }
}

/// `AMD_cache_info`: leaves 0x80000005 (L1, associativity taken raw) and 0x80000006 (L2, L3).
fn amd_cache_info(src: &impl CpuidSource) -> Option<HwInfo> {
    let ext_level = src.cpuid(0x8000_0000, 0)[0];
    if ext_level & 0x8000_0000 == 0 || ext_level < 0x8000_0006 {
        return None;
    }
    let [_, _, d1i, i1i] = src.cpuid(0x8000_0005, 0);
    let [_, _, mut l2i, l3i] = src.cpuid(0x8000_0006, 0);
    let model = src.cpuid(1, 0)[0];
    if model == 0x630 {
        // Duron stepping A0 misreports its L2 as 1 KB; it is 64 KB.
        l2i = (64 << 16) | (l2i & 0xffff);
    }
    let l3_units = (l3i >> 18) & 0x3fff;
    let mut info = HwInfo {
        num_levels: if l3_units > 0 { 3 } else { 2 },
        caches: Vec::with_capacity(4),
    };
    let l1 = |kind, r: u32| hw(kind, 1, (r >> 24) & 0xff, (r >> 16) & 0xff, r & 0xff);
    info.caches.push(l1(Kind::Data, d1i));
    info.caches.push(l1(Kind::Insn, i1i));
    info.caches.push(hw(
        Kind::Unified,
        2,
        (l2i >> 16) & 0xffff,
        amd_l2_l3_assoc((l2i >> 12) & 0xf),
        l2i & 0xff,
    ));
    if l3_units > 0 {
        info.caches.push(hw(
            Kind::Unified,
            3,
            l3_units * 512,
            amd_l2_l3_assoc((l3i >> 12) & 0xf),
            l3i & 0xff,
        ));
    }
    Some(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A canned CPUID: unlisted leaves return zeros.
    struct Canned(HashMap<(u32, u32), [u32; 4]>);

    impl CpuidSource for Canned {
        fn cpuid(&self, leaf: u32, subleaf: u32) -> [u32; 4] {
            self.0.get(&(leaf, subleaf)).copied().unwrap_or([0; 4])
        }
    }

    fn canned(entries: &[((u32, u32), [u32; 4])]) -> Canned {
        Canned(entries.iter().copied().collect())
    }

    const INTEL: [u32; 4] = [0x20, 0x756e_6547, 0x6c65_746e, 0x4965_6e69];
    const AMD: [u32; 4] = [0x10, 0x6874_7541, 0x444d_4163, 0x6974_6e65];

    fn g(size: u32, assoc: u32, line: u32) -> CacheGeometry {
        CacheGeometry::new(size, assoc, line)
    }

    /// The Xeon this was developed on (values read with CPUID; valgrind 3.19 printed
    /// 32768/8/64, 49152/12/64 and 109051904 B 26-way after the tweak).
    fn this_xeon() -> Canned {
        canned(&[
            ((0, 0), INTEL),
            ((1, 0), [0x0008_06f8, 0x0002_0800, 0xfffa_3203, 0x1f8b_fbff]),
            ((2, 0), [0x00fe_ff01, 0x0000_00f0, 0, 0]),
            ((4, 0), [0x0400_0121, 0x02c0_003f, 0x0000_003f, 0]),
            ((4, 1), [0x0400_0122, 0x01c0_003f, 0x0000_003f, 0]),
            ((4, 2), [0x0400_0143, 0x03c0_003f, 0x0000_07ff, 0]),
            ((4, 3), [0x0400_4163, 0x0380_003f, 0x0001_bfff, 4]),
        ])
    }

    #[test]
    fn intel_leaf4_with_l3_and_tweak() {
        let d = detect_with(&this_xeon());
        assert_eq!(d.i1, g(32768, 8, 64));
        assert_eq!(d.d1, g(49152, 12, 64));
        assert_eq!(d.ll, g(109051904, 26, 64));
        assert_eq!(
            d.warnings,
            [
                "warning: L3 cache found, using its data for the LL simulation.",
                "warning: specified LL cache: line_size 64  assoc 15  total_size 110,100,480",
                "warning: simulated LL cache: line_size 64  assoc 26  total_size 109,051,904",
            ]
        );
        assert!(!d.used_defaults);
    }

    /// AMD EPYC Zen 3 (reference §3.5): L3 edx=0x08009140 -> 256 MiB, assoc code 9 ->
    /// direct-mapped.
    #[test]
    fn amd_zen3_l3_is_direct_mapped() {
        let d = detect_with(&canned(&[
            ((0, 0), AMD),
            ((1, 0), [0x00a0_0f11, 0, 0, 0]),
            ((0x8000_0000, 0), [0x8000_0023, 0, 0, 0]),
            (
                (0x8000_0005, 0),
                [0xff40_ff40, 0xff40_ff40, 0x2008_0140, 0x2008_0140],
            ),
            ((0x8000_0006, 0), [0, 0, 0x0200_6140, 0x0800_9140]),
        ]));
        assert_eq!(d.i1, g(32768, 8, 64));
        assert_eq!(d.d1, g(32768, 8, 64));
        assert_eq!(d.ll, g(268435456, 1, 64));
        assert_eq!(d.ll.desc(), "268435456 B, 64 B, direct-mapped");
        assert_eq!(
            d.warnings,
            ["warning: L3 cache found, using its data for the LL simulation."]
        );
    }

    #[test]
    fn amd_without_l3_uses_l2_and_decodes_assoc_table() {
        let d = detect_with(&canned(&[
            ((0, 0), AMD),
            ((0x8000_0000, 0), [0x8000_0008, 0, 0, 0]),
            // D1 64 KB 2-way 64 B; I1 64 KB 2-way 64 B (K8-like).
            ((0x8000_0005, 0), [0, 0, 0x4002_0140, 0x4002_0140]),
            // L2 1 MB, code 8 -> 16-way, 64 B; no L3.
            ((0x8000_0006, 0), [0, 0, 0x0400_8140, 0]),
        ]));
        assert_eq!(d.ll, g(1 << 20, 16, 64));
        assert!(d.warnings.is_empty());
        for (code, ways) in [
            (1, 1),
            (2, 2),
            (4, 4),
            (6, 8),
            (8, 16),
            (0xa, 32),
            (0xb, 48),
        ] {
            assert_eq!(amd_l2_l3_assoc(code), ways);
        }
        for code in [0, 3, 5, 7, 9, 0xf] {
            assert_eq!(amd_l2_l3_assoc(code), 1);
        }
    }

    #[test]
    fn amd_duron_l2_hack() {
        let d = detect_with(&canned(&[
            ((0, 0), AMD),
            ((1, 0), [0x630, 0, 0, 0]),
            ((0x8000_0000, 0), [0x8000_0008, 0, 0, 0]),
            ((0x8000_0005, 0), [0, 0, 0x4002_0140, 0x4002_0140]),
            ((0x8000_0006, 0), [0, 0, 0x0001_8140, 0]),
        ]));
        assert_eq!(d.ll, g(65536, 16, 64));
    }

    #[test]
    fn amd_old_ext_level_falls_back_to_defaults() {
        let d = detect_with(&canned(&[
            ((0, 0), AMD),
            ((0x8000_0000, 0), [0x8000_0004, 0, 0, 0]),
        ]));
        assert_eq!((d.i1, d.d1, d.ll), (DEFAULT_I1, DEFAULT_D1, DEFAULT_LL));
        assert_eq!(d.warnings, DEFAULTS_WARNING);
        assert!(d.used_defaults);
    }

    #[test]
    fn intel_descriptor_bytes_core2() {
        // AL=1; 0x30 I1 32K/8/64, 0x2c D1 32K/8/64, 0x7d L2 2M/8/64, 0x05/0xb0 TLBs.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x7d30_2c01, 0x0000_b005, 0, 0]),
        ]));
        assert_eq!(d.i1, g(32768, 8, 64));
        assert_eq!(d.d1, g(32768, 8, 64));
        assert_eq!(d.ll, g(2 << 20, 8, 64));
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn intel_12mb_l3_descriptor_is_tweaked() {
        // 0x4c = 12 MB 12-way L3; with I1/D1/L2.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x2130_2c01, 0x0000_004c, 0, 0]),
        ]));
        // 12 MiB / 12 / 64 = 16384 sets: already a power of two, no tweak.
        assert_eq!(d.ll, g(12 << 20, 12, 64));
        assert_eq!(
            d.warnings,
            ["warning: L3 cache found, using its data for the LL simulation."]
        );
        // Leaf 4 with a 12 MiB 16-way L3 (12288 sets): 8192 sets, 24-way.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x0000_ff01, 0, 0, 0]),
            ((4, 0), [0x121, (7 << 22) | 63, 63, 0]),
            ((4, 1), [0x122, (7 << 22) | 63, 63, 0]),
            ((4, 2), [0x143, (3 << 22) | 63, 1023, 0]),
            ((4, 3), [0x163, (15 << 22) | 63, 12287, 0]),
        ]));
        assert_eq!(d.ll, g(12582912, 24, 64));
        assert_eq!(d.warnings.len(), 3);
    }

    #[test]
    fn intel_bytes_after_ff_come_from_the_clobbered_buffer() {
        // Leaf 2 = [01, 00, ff, 2c]: the 0x2c after 0xff is never seen (Valgrind reads the
        // last leaf-4 result there), so D1 is not duplicated and the list stays sensible.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x2cff_0001, 0, 0, 0]),
            ((4, 0), [0x121, (7 << 22) | 63, 63, 0]),
            ((4, 1), [0x122, (7 << 22) | 63, 63, 0]),
            ((4, 2), [0x143, (3 << 22) | 63, 1023, 0]),
        ]));
        assert_eq!(d.d1, g(32768, 8, 64));
        assert_eq!(d.ll, g(256 << 10, 4, 64));
        assert!(!d.used_defaults);
        // Before the 0xff it is seen: D1 twice -> not sensible -> defaults.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x00ff_2c01, 0, 0, 0]),
            ((4, 0), [0x121, (7 << 22) | 63, 63, 0]),
            ((4, 1), [0x122, (7 << 22) | 63, 63, 0]),
            ((4, 2), [0x143, (3 << 22) | 63, 1023, 0]),
        ]));
        assert!(d.used_defaults);
        assert_eq!(d.warnings, DEFAULTS_WARNING);
    }

    #[test]
    fn intel_failures_fall_back() {
        // Max leaf 1.
        let mut low = INTEL;
        low[0] = 1;
        assert!(detect_with(&canned(&[((0, 0), low)])).used_defaults);
        // AL != 1.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x0030_2c02, 0, 0, 0]),
        ]));
        assert!(d.used_defaults);
        // IA-64 descriptor.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x0030_1001, 0, 0, 0]),
        ]));
        assert!(d.used_defaults);
        // Unknown vendor; max leaf 0.
        let d = detect_with(&canned(&[((0, 0), [0xd, 1, 2, 3])]));
        assert!(d.used_defaults);
        assert!(detect_with(&canned(&[])).used_defaults);
    }

    #[test]
    fn intel_l1_only_warns_l2_not_installed() {
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x0030_2c01, 0, 0, 0]),
        ]));
        assert_eq!(
            d.warnings,
            [
                "warning: L2 cache not installed, ignore LL results.",
                DEFAULTS_WARNING[0],
                DEFAULTS_WARNING[1]
            ]
        );
        assert_eq!(d.ll, DEFAULT_LL);
    }

    #[test]
    fn pentium4_trace_cache() {
        // 0x70 12K-uop trace cache, 0x66 D1 8K/4/64, 0x7b L2 512K/8/64.
        let d = detect_with(&canned(&[
            ((0, 0), INTEL),
            ((2, 0), [0x7b66_7001, 0, 0, 0]),
        ]));
        assert_eq!(d.i1, g(16384, 8, 32));
        assert_eq!(d.d1, g(8192, 4, 64));
        assert_eq!(
            d.warnings,
            [
                "warning: Pentium 4 with 12 KB micro-op instruction trace cache",
                "         Simulating a 16 KB I-cache with 32 B lines",
            ]
        );
    }

    #[test]
    fn xeon_mp_descriptor_0x49_is_l3() {
        let base = [((0, 0), INTEL), ((2, 0), [0x4930_2c01, 0x0000_007d, 0, 0])];
        // Family 15 model 6: 0x49 is a 4 MB L3 above the 2 MB L2.
        let mut e = base.to_vec();
        e.push(((1, 0), [0x0000_0f60, 0, 0, 0]));
        let d = detect_with(&canned(&e));
        assert_eq!(d.ll, g(4 << 20, 16, 64));
        assert_eq!(d.warnings.len(), 1);
        // Otherwise it is a second L2: not sensible.
        assert!(detect_with(&canned(&base)).used_defaults);
    }

    #[test]
    fn centaur_is_hard_coded() {
        let d = detect_with(&canned(&[(
            (0, 0),
            [1, 0x746e_6543, 0x736c_7561, 0x4872_7561],
        )]));
        assert_eq!(d.i1, g(65536, 4, 16));
        assert_eq!(d.d1, g(65536, 16, 16));
        assert_eq!(d.ll, g(65536, 16, 16));
    }

    #[test]
    fn resolve_applies_overrides_and_drops_defaults_warning_only_when_all_given() {
        let d = detect_with(&canned(&[]));
        let some = CacheOverrides {
            i1: Some(g(32768, 8, 64)),
            ..CacheOverrides::default()
        };
        let r = d.resolve(&some).expect("defaults are valid");
        assert_eq!(r.i1, g(32768, 8, 64));
        assert_eq!(r.d1, DEFAULT_D1);
        assert_eq!(r.warnings, DEFAULTS_WARNING);
        let all = CacheOverrides {
            i1: Some(g(32768, 8, 64)),
            d1: Some(g(32768, 8, 64)),
            ll: Some(g(1 << 20, 16, 64)),
        };
        let r = d.resolve(&all).expect("valid");
        assert!(r.warnings.is_empty());
        assert_eq!(r.ll, g(1 << 20, 16, 64));
        // Detected warnings other than the defaults one stay (e.g. the L3 warning).
        let r = detect_with(&this_xeon()).resolve(&all).expect("valid");
        assert_eq!(r.warnings.len(), 3);
        assert_eq!(r.ll, g(1 << 20, 16, 64));
    }

    #[test]
    fn resolve_rejects_unsupported_detected_cache_unless_overridden() {
        // AMD with a 48 KB 12-way L1 -> fine; with 0xFF ("fully associative") D1 assoc taken
        // raw: 32 KB / 64 B = 512 lines < 255? no: 512/255 is not a power of two.
        let src = canned(&[
            ((0, 0), AMD),
            ((0x8000_0000, 0), [0x8000_0008, 0, 0, 0]),
            ((0x8000_0005, 0), [0, 0, 0x20ff_0140, 0x2008_0140]),
            ((0x8000_0006, 0), [0, 0, 0x0200_6140, 0]),
        ]);
        let d = detect_with(&src);
        assert_eq!(d.d1, g(32768, 255, 64));
        let err = d
            .resolve(&CacheOverrides::default())
            .expect_err("unsupported");
        assert_eq!(err.level, CacheLevel::D1);
        assert_eq!(
            err.messages,
            [
                "Auto-detected D1 cache configuration not supported: Cache set count is not a power of two.",
                "  D1: 32,768 B, 255-way, 64 B lines",
                "As it probably should be supported, please report a bug!",
                "Bypass this message by using option --D1=...",
            ]
        );
        let r = d
            .resolve(&CacheOverrides {
                d1: Some(g(32768, 8, 64)),
                ..CacheOverrides::default()
            })
            .expect("overridden");
        assert_eq!(r.d1, g(32768, 8, 64));
        assert_eq!(r.messages.len(), 2);
    }
}
