//! The guest's mapped ELF modules, for symbolisation, read from `/proc/self/maps` (guest and
//! rgrind share the process). Modules are remembered once seen, so code that was unmapped
//! before the end (dlclose) still symbolises.
//!
//! rgrind's own executable and the libraries of its own link map (its libc, the libstdc++ of
//! `gnu_demangle`) are left out: no guest code runs there, and the guest's copies of the same
//! files must not take their load bias from them.
use dumper::ModuleInfo;
use std::collections::BTreeMap;

/// Address ranges `[start, end)`.
type Ranges = Vec<(u64, u64)>;

#[derive(Default)]
pub struct Modules {
    /// Path -> (load bias, mapped ranges).
    seen: BTreeMap<String, (u64, Vec<(u64, u64)>)>,
    vdso: Option<(u64, u64)>,
    /// Every mapping of the last read of the maps (modules or not), sorted: code there
    /// needs no new read until the mappings change ([`Modules::mappings_changed`]).
    known: Ranges,
    /// Path -> `(p_offset, p_vaddr)` of its first PT_LOAD (None: not an ELF file), read
    /// once per path.
    first_loads: BTreeMap<String, Option<(u64, u64)>>,
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Where an ELF64 header (the first 64 bytes) says the program headers are: offset, entry
/// size, count.
fn program_headers(header: &[u8]) -> Option<(u64, usize, usize)> {
    if header.get(..4)? != b"\x7fELF" {
        return None;
    }
    let phoff = read_u64(header, 0x20)?;
    let phentsize = read_u16(header, 0x36)? as usize;
    let phnum = read_u16(header, 0x38)? as usize;
    Some((phoff, phentsize, phnum))
}

/// `(p_offset, p_vaddr)` of the first PT_LOAD in a program header table.
fn first_load_in(table: &[u8], phentsize: usize, phnum: usize) -> Option<(u64, u64)> {
    (0..phnum).find_map(|i| {
        let ph = i * phentsize;
        let ty = u32::from_le_bytes(table.get(ph..ph + 4)?.try_into().ok()?);
        (ty == 1).then(|| Some((read_u64(table, ph + 8)?, read_u64(table, ph + 16)?)))?
    })
}

/// `(p_offset, p_vaddr)` of the first PT_LOAD of a whole ELF64 image in memory.
fn first_load(image: &[u8]) -> Option<(u64, u64)> {
    let (phoff, phentsize, phnum) = program_headers(image)?;
    first_load_in(image.get(usize::try_from(phoff).ok()?..)?, phentsize, phnum)
}

/// The same for an ELF file, reading its program headers where the header says they are
/// (a BOLT-optimised library such as rustc's `libLLVM.so` has them 140 MB into the file).
fn first_load_of_file(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    f.read_exact_at(&mut header, 0).ok()?;
    let (phoff, phentsize, phnum) = program_headers(&header)?;
    let mut table = vec![0u8; phentsize.checked_mul(phnum)?.min(1 << 20)];
    f.read_exact_at(&mut table, phoff).ok()?;
    first_load_in(&table, phentsize, phnum)
}

/// The modules mapped now, for the client requests that symbolise an address (rare: the
/// maps are read for each).
fn mapped_now() -> Vec<ModuleInfo> {
    let mut modules = Modules::default();
    modules.refresh();
    modules.infos()
}

/// The source file name (without its directory) and line of guest code address `addr`, from
/// the modules mapped now, for `VALGRIND_MAP_IP_TO_SRCLOC` (rare: the maps are read and the
/// symboliser built for each request).
pub fn source_location(addr: u64) -> Option<(String, u32)> {
    let loc = dumper::Symbolizer::new(mapped_now()).lookup_line(addr);
    let file = loc.file?;
    let name = file.rsplit('/').next().unwrap_or(&file).to_string();
    (loc.line != 0).then_some((name, loc.line))
}

/// `--num-callers` and `--show-below-main`.
static STACK_TRACE_OPTIONS: std::sync::OnceLock<(usize, bool)> = std::sync::OnceLock::new();

/// Sets `--num-callers` and `--show-below-main` for [`print_backtrace`].
pub fn set_stack_trace_options(num_callers: usize, show_below_main: bool) {
    let _ = STACK_TRACE_OPTIONS.set((num_callers, show_below_main));
}

/// Prints the guest's call stack from `rip` (with its `rsp` and `rbp`) to the log as
/// Valgrind's `VALGRIND_PRINTF_BACKTRACE` does without inlined frames (its default for these
/// tools): `   at 0x..: fn (file:line)`, then `   by ...` for each caller, up to `main` or a
/// function below it (named `(below main)`), or with `--show-below-main=yes` on (the
/// functions' own names), at most `--num-callers` frames.
pub fn print_backtrace(rip: u64, rsp: u64, rbp: u64) {
    let (num_callers, show_below_main) = STACK_TRACE_OPTIONS.get().copied().unwrap_or((12, false));
    use dumper::symbols::unwind::{Frame, Unwinder};
    let infos = mapped_now();
    let unwinder = Unwinder::new(&infos);
    let symbols = dumper::Symbolizer::new(infos);
    let read = |addr: u64| {
        let mut word = [0u8; 8];
        (dbt_core::guest_mem::read(addr, &mut word) == 8).then(|| u64::from_le_bytes(word))
    };
    let frame = Frame {
        pc: rip,
        sp: rsp,
        fp: rbp,
    };
    for (k, &pc) in unwinder
        .backtrace(frame, num_callers, &read)
        .iter()
        .enumerate()
    {
        // A caller's frame shows the byte before its return address, in the call, as
        // Valgrind's stack traces do.
        let pc = if k == 0 { pc } else { pc.wrapping_sub(1) };
        let loc = symbols.lookup_fast(pc);
        let own = show_below_main
            .then(|| symbols.demangled_name(pc))
            .flatten();
        let name = own.as_deref().unwrap_or(loc.fn_name());
        let place = match &loc.file {
            Some(file) if loc.line != 0 => {
                let base = file.rsplit('/').next().unwrap_or(file);
                format!("({base}:{})", loc.line)
            }
            _ => match symbols.mapped_object(pc) {
                Some(object) => format!("(in {object})"),
                None => "(in ???)".to_string(),
            },
        };
        let word = if k == 0 { "at" } else { "by" };
        crate::log::line(&format!("   {word} 0x{pc:X}: {name} {place}"));
        if !show_below_main && (name == "main" || name == "(below main)") {
            break;
        }
    }
}

/// Whether system call `nr` maps or unmaps memory (see [`Modules::mappings_changed`]).
pub fn maps_memory(nr: u64) -> bool {
    [
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_shmat,
    ]
    .contains(&(nr as i64))
}

/// The address ranges of rgrind's own loaded objects (its link map, not the guest's).
fn host_objects() -> Ranges {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        out: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid `info` whose `dlpi_phdr` has `dlpi_phnum`
        // entries, and `out` is the `Ranges` given to it below.
        unsafe {
            let info = &*info;
            let out = &mut *out.cast::<Ranges>();
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD {
                    let s = info.dlpi_addr.wrapping_add(ph.p_vaddr);
                    out.push((s & !0xfff, s.wrapping_add(ph.p_memsz)));
                }
            }
        }
        0
    }
    let mut out: Ranges = Vec::new();
    // SAFETY: `each` only reads what dl_iterate_phdr passes and pushes to `out`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut out as *mut Ranges).cast()) };
    out
}

impl Modules {
    /// Whether `addr` lay in a mapping at the last read of the maps, and none has changed
    /// since: a new module there would have been recorded then.
    pub fn covers(&self, addr: u64) -> bool {
        let i = self.known.partition_point(|&(_, e)| e <= addr);
        self.known.get(i).is_some_and(|&(s, _)| s <= addr)
    }

    /// The guest mapped or unmapped memory: code at an address known before may now be
    /// another module's.
    pub fn mappings_changed(&mut self) {
        self.known.clear();
    }

    /// Re-reads `/proc/self/maps` and records every module mapped now; true when that
    /// changed what [`Modules::infos`] returns.
    pub fn refresh(&mut self) -> bool {
        let Ok(maps) = std::fs::read_to_string("/proc/thread-self/maps") else {
            return false;
        };
        let own = std::env::current_exe()
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let mut changed = false;
        self.known.clear();
        let host = host_objects();
        // path -> (ranges, start of the mapping at file offset 0)
        let mut now: BTreeMap<&str, (Ranges, Ranges)> = BTreeMap::new();
        for line in maps.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(_perms), Some(off)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let path = it.nth(2).unwrap_or("");
            let Some((s, e)) = range.split_once('-') else {
                continue;
            };
            let (Ok(s), Ok(e), Ok(off)) = (
                u64::from_str_radix(s, 16),
                u64::from_str_radix(e, 16),
                u64::from_str_radix(off, 16),
            ) else {
                continue;
            };
            self.known.push((s, e));
            if path == "[vdso]" {
                changed |= self.vdso != Some((s, e));
                self.vdso = Some((s, e));
                continue;
            }
            let hosts = |&(hs, he): &(u64, u64)| hs <= s && e <= (he + 0xfff) & !0xfff;
            if !path.starts_with('/') || Some(path) == own.as_deref() || host.iter().any(hosts) {
                continue;
            }
            let entry = now.entry(path).or_default();
            entry.0.push((s, e));
            entry.1.push((off, s));
        }
        self.known.sort_unstable();
        for (path, (ranges, offs)) in now {
            let first = match self.first_loads.get(path) {
                Some(&f) => f,
                None => {
                    let f = first_load_of_file(path);
                    self.first_loads.insert(path.to_string(), f);
                    f
                }
            };
            let Some((p_off, p_vaddr)) = first else {
                continue;
            };
            let page = p_off & !0xfff;
            let Some(&(_, start)) = offs.iter().find(|&&(o, _)| o == page) else {
                continue;
            };
            let bias = start.wrapping_sub(p_vaddr & !0xfff);
            let e = self
                .seen
                .entry(path.to_string())
                .or_insert((bias, Vec::new()));
            if e.0 != bias {
                *e = (bias, Vec::new());
            }
            for r in ranges {
                if !e.1.contains(&r) {
                    e.1.push(r);
                    changed = true;
                }
            }
        }
        changed
    }

    /// The module list for the symboliser.
    pub fn infos(&self) -> Vec<ModuleInfo> {
        let mut out: Vec<ModuleInfo> = self
            .seen
            .iter()
            .map(|(p, (bias, ranges))| {
                let mut r = ranges.clone();
                r.sort_unstable();
                ModuleInfo::file(p.clone(), *bias, r)
            })
            .collect();
        if let Some((s, e)) = self.vdso {
            let len = (e - s) as usize;
            // SAFETY: the vDSO mapping [s, e) is readable for the whole process lifetime
            // (it was listed in /proc/self/maps and the kernel never unmaps it).
            let image = unsafe { std::slice::from_raw_parts(s as *const u8, len) }.to_vec();
            let bias = first_load(&image).map_or(s, |(_, v)| s.wrapping_sub(v & !0xfff));
            out.push(ModuleInfo::memory("[vdso]", bias, vec![(s, e)], image));
        }
        out
    }
}
