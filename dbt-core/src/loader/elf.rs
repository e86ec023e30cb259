//! ELF parsing and mapping: checks an ELF header the way rgrind needs it (64-bit, little-endian,
//! x86-64, ET_EXEC or ET_DYN), and maps a module's PT_LOAD segments into a reservation.
//!
//! # Invariants
//! * A [`Reservation`] owns its address range: it is unmapped on drop unless [`MappedImage::keep`]
//!   hands it to the caller; segments are mapped with `MAP_FIXED` only inside it.
//! * ET_DYN load biases are multiples of the largest power-of-two `p_align` of the PT_LOADs (and
//!   of the page size); ET_EXEC modules are mapped at their link addresses or not at all.
//!
//! # Deliberately not done here
//! * No relocation, symbol or dynamic-section processing: ld.so (or static-pie's self-relocation)
//!   does that in the guest.
//! * The file stays open only while mapping; the mappings keep their own references.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::{last_errno, page_size, round_down, round_up, show, LoadError, MappedModule};

/// ELF file type: executable at fixed addresses.
pub const ET_EXEC: u16 = 2;
/// ELF file type: shared object / position-independent executable.
pub const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;
const PT_PHDR: u32 = 6;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
/// Size of an ELF64 file header.
const EHDR_SIZE: usize = 64;
/// Size of an ELF64 program header.
const PHDR_SIZE: usize = 56;
/// Upper bound on the program-header table (the kernel's limit too).
const MAX_PHDR_BYTES: usize = 65536;
/// Longest PT_INTERP path accepted (PATH_MAX).
const MAX_INTERP_LEN: u64 = 4096;

/// The fields of an ELF64 file header the loader uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ElfHeader {
    /// `ET_EXEC` or `ET_DYN`.
    pub e_type: u16,
    /// Entry point (unrelocated).
    pub e_entry: u64,
    /// File offset of the program headers.
    pub e_phoff: u64,
    /// Number of program headers.
    pub e_phnum: u16,
}

/// One ELF64 program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProgramHeader {
    /// Segment type (`PT_LOAD`, ...).
    pub p_type: u32,
    /// `PF_R | PF_W | PF_X` bits.
    pub p_flags: u32,
    /// File offset.
    pub p_offset: u64,
    /// Link-time address.
    pub p_vaddr: u64,
    /// Bytes in the file.
    pub p_filesz: u64,
    /// Bytes in memory.
    pub p_memsz: u64,
    /// Alignment.
    pub p_align: u64,
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Valgrind's name for the platform an ELF identification belongs to (as its launcher picks the
/// tool binary), or "unknown".
fn platform_name(class: u8, data: u8, machine: u16) -> &'static str {
    match (class, data, machine) {
        (1, 1, 3) => "x86-linux",
        (2, 1, 62) => "amd64-linux",
        (1, 1, 40) => "arm-linux",
        (2, 1, 183) => "arm64-linux",
        (1, 2, 20) => "ppc32-linux",
        (2, 2, 21) => "ppc64be-linux",
        (2, 1, 21) => "ppc64le-linux",
        (2, 2, 22) => "s390x-linux",
        (1, _, 8) => "mips32-linux",
        (2, _, 8) => "mips64-linux",
        (1, 1, 249) => "nanomips-linux",
        _ => "unknown",
    }
}

/// True when `bytes` starts with the ELF magic.
pub(crate) fn is_elf(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Checks that `bytes` (the start of the file at `path`) is an ELF header rgrind can run: 64-bit,
/// little-endian, x86-64, ET_EXEC or ET_DYN, with a sane program-header table.
pub(crate) fn parse_elf_header(path: &Path, bytes: &[u8]) -> Result<ElfHeader, LoadError> {
    let malformed = |what: &str| LoadError::Malformed {
        path: show(path),
        what: what.to_string(),
    };
    if !is_elf(bytes) {
        return Err(malformed("no ELF magic"));
    }
    if bytes.len() < 20 {
        return Err(malformed("truncated ELF header"));
    }
    let (class, data) = (bytes[4], bytes[5]);
    let machine = if data == 2 {
        u16::from_be_bytes([bytes[18], bytes[19]])
    } else {
        u16::from_le_bytes([bytes[18], bytes[19]])
    };
    if class != 2 || data != 1 || machine != EM_X86_64 {
        return Err(LoadError::UnsupportedPlatform {
            path: show(path),
            platform: platform_name(class, data, machine).to_string(),
        });
    }
    if bytes.len() < EHDR_SIZE {
        return Err(malformed("truncated ELF header"));
    }
    if bytes[6] != 1 || u32_at(bytes, 20) != 1 {
        return Err(malformed("unknown ELF version"));
    }
    let e_type = u16_at(bytes, 16);
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(LoadError::NotExecutable { path: show(path) });
    }
    let header = ElfHeader {
        e_type,
        e_entry: u64_at(bytes, 24),
        e_phoff: u64_at(bytes, 32),
        e_phnum: u16_at(bytes, 56),
    };
    let e_phentsize = u16_at(bytes, 54);
    if usize::from(e_phentsize) != PHDR_SIZE {
        return Err(malformed("program header size is not 56"));
    }
    if header.e_phnum == 0 || usize::from(header.e_phnum) * PHDR_SIZE > MAX_PHDR_BYTES {
        return Err(malformed("bad number of program headers"));
    }
    Ok(header)
}

/// An opened ELF file whose header and program headers have been checked.
#[derive(Debug)]
pub(crate) struct ElfFile {
    path: PathBuf,
    file: File,
    file_size: u64,
    /// The checked file header.
    pub(crate) header: ElfHeader,
    /// All program headers, in file order.
    pub(crate) phdrs: Vec<ProgramHeader>,
}

/// Opens `path` for execution the way `execve` checks it: it must exist, not be a directory,
/// carry an execute permission bit and be readable. Returns the file and its size.
pub(crate) fn open_executable(path: &Path) -> Result<(File, u64), LoadError> {
    let os = |errno: i32| LoadError::Os {
        path: show(path),
        errno,
    };
    let meta = std::fs::metadata(path).map_err(|e| os(e.raw_os_error().unwrap_or(libc::EIO)))?;
    if meta.is_dir() {
        return Err(LoadError::IsDirectory { path: show(path) });
    }
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 || !executable_by_us(path) {
        return Err(os(libc::EACCES));
    }
    let file = File::open(path).map_err(|e| os(e.raw_os_error().unwrap_or(libc::EIO)))?;
    Ok((file, meta.size()))
}

/// `access(path, X_OK)`.
pub(crate) fn executable_by_us(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

/// Reads up to `len` bytes at `offset` (fewer at end of file).
pub(crate) fn read_prefix(
    file: &File,
    path: &Path,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, LoadError> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(LoadError::Os {
                    path: show(path),
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                })
            }
        }
    }
    buf.truncate(got);
    Ok(buf)
}

impl ElfFile {
    /// Opens and checks the ELF file at `path`.
    pub(crate) fn open(path: &Path) -> Result<ElfFile, LoadError> {
        let (file, file_size) = open_executable(path)?;
        let head = read_prefix(&file, path, 0, EHDR_SIZE)?;
        if !is_elf(&head) {
            return Err(LoadError::Os {
                path: show(path),
                errno: libc::ENOEXEC,
            });
        }
        let header = parse_elf_header(path, &head)?;
        let table_len = usize::from(header.e_phnum) * PHDR_SIZE;
        let table = read_prefix(&file, path, header.e_phoff, table_len)?;
        if table.len() != table_len {
            return Err(LoadError::Malformed {
                path: show(path),
                what: "program headers extend past the end of the file".to_string(),
            });
        }
        let phdrs = table
            .chunks_exact(PHDR_SIZE)
            .map(|p| ProgramHeader {
                p_type: u32_at(p, 0),
                p_flags: u32_at(p, 4),
                p_offset: u64_at(p, 8),
                p_vaddr: u64_at(p, 16),
                p_filesz: u64_at(p, 32),
                p_memsz: u64_at(p, 40),
                p_align: u64_at(p, 48),
            })
            .collect();
        Ok(ElfFile {
            path: path.to_path_buf(),
            file,
            file_size,
            header,
            phdrs,
        })
    }

    fn malformed(&self, what: &str) -> LoadError {
        LoadError::Malformed {
            path: show(&self.path),
            what: what.to_string(),
        }
    }

    /// The PT_INTERP path, if the file has one.
    pub(crate) fn interp_path(&self) -> Result<Option<PathBuf>, LoadError> {
        use std::os::unix::ffi::OsStrExt;
        let Some(ph) = self.phdrs.iter().find(|p| p.p_type == PT_INTERP) else {
            return Ok(None);
        };
        if ph.p_filesz < 2 || ph.p_filesz > MAX_INTERP_LEN {
            return Err(self.malformed("bad PT_INTERP size"));
        }
        let bytes = read_prefix(&self.file, &self.path, ph.p_offset, ph.p_filesz as usize)?;
        match bytes.iter().position(|&b| b == 0) {
            Some(0) | None => Err(self.malformed("PT_INTERP is not a NUL-terminated path")),
            Some(n) => Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(
                &bytes[..n],
            )))),
        }
    }

    /// Maps all PT_LOAD segments, followed (when `brk_reserve > 0`) by a `PROT_NONE`,
    /// `MAP_NORESERVE` reservation of `brk_reserve` bytes (a page multiple) right after the image.
    /// A position-independent image goes to the first of `prefer` (aligned up) whose whole
    /// range is free, else where the kernel puts it.
    pub(crate) fn map(&self, brk_reserve: u64, prefer: &[u64]) -> Result<MappedImage, LoadError> {
        let page = page_size();
        let loads: Vec<&ProgramHeader> =
            self.phdrs.iter().filter(|p| p.p_type == PT_LOAD).collect();
        if loads.is_empty() {
            return Err(self.malformed("no PT_LOAD segment"));
        }
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        let mut align = page;
        for ph in &loads {
            let end = ph
                .p_vaddr
                .checked_add(ph.p_memsz)
                .ok_or_else(|| self.malformed("segment wraps around the address space"))?;
            if ph.p_filesz > ph.p_memsz {
                return Err(self.malformed("segment has p_filesz > p_memsz"));
            }
            if ph
                .p_offset
                .checked_add(ph.p_filesz)
                .is_none_or(|e| e > self.file_size)
            {
                return Err(self.malformed("segment extends past the end of the file"));
            }
            if ph.p_vaddr.wrapping_sub(ph.p_offset) % page != 0 {
                return Err(
                    self.malformed("segment offset and address disagree modulo the page size")
                );
            }
            lo = lo.min(round_down(ph.p_vaddr, page));
            hi = hi.max(end);
            if ph.p_align.is_power_of_two() {
                align = align.max(ph.p_align);
            }
        }
        let hi = round_up(hi, page)
            .ok_or_else(|| self.malformed("segment ends past the address space"))?;
        let span = hi - lo;
        let total = span
            .checked_add(brk_reserve)
            .ok_or_else(|| self.map_error("the program", libc::ENOMEM))?;

        let (bias, res) = if self.header.e_type == ET_EXEC {
            let res = Reservation::fixed(lo, span)
                .map_err(|errno| self.fixed_error("the program", lo, hi, errno))?;
            if brk_reserve > 0 {
                let brk = Reservation::fixed(hi, brk_reserve).map_err(|errno| {
                    self.fixed_error(
                        "the brk reservation",
                        hi,
                        hi.wrapping_add(brk_reserve),
                        errno,
                    )
                })?;
                std::mem::forget(brk);
            }
            // Post-invariant: [lo, lo + total) is ours; one Reservation now owns it all.
            std::mem::forget(res);
            (
                0,
                Reservation {
                    addr: lo,
                    len: total,
                },
            )
        } else {
            let slack = align - page;
            let wide_len = total
                .checked_add(slack)
                .ok_or_else(|| self.map_error("the program", libc::ENOMEM))?;
            let preferred = prefer.iter().find_map(|base| {
                let at = base.checked_add(align - 1)? & !(align - 1);
                Reservation::fixed(at, total).ok()
            });
            match preferred {
                Some(res) => (res.addr.wrapping_sub(lo), res),
                None => {
                    let wide = Reservation::anywhere(wide_len)
                        .map_err(|errno| self.map_error("the program", errno))?;
                    let bias = wide.addr.wrapping_sub(lo).wrapping_add(align - 1) & !(align - 1);
                    let start = lo.wrapping_add(bias);
                    (bias, wide.trim(start, total))
                }
            }
        };

        for ph in &loads {
            self.map_segment(ph, bias, page)?;
        }
        let exec_ranges = loads
            .iter()
            .filter(|p| p.p_flags & PF_X != 0 && p.p_memsz > 0)
            .map(|p| {
                let s = p.p_vaddr.wrapping_add(bias);
                (
                    round_down(s, page),
                    round_down(s + p.p_memsz + page - 1, page),
                )
            })
            .collect();
        let phdr = match self.phdrs.iter().find(|p| p.p_type == PT_PHDR) {
            Some(p) => p.p_vaddr.wrapping_add(bias),
            None => {
                let off = self.header.e_phoff;
                let containing = loads
                    .iter()
                    .find(|p| p.p_offset <= off && off - p.p_offset < p.p_filesz)
                    .unwrap_or(&loads[0]);
                containing
                    .p_vaddr
                    .wrapping_sub(containing.p_offset)
                    .wrapping_add(off)
                    .wrapping_add(bias)
            }
        };
        let module = MappedModule {
            path: self.path.clone(),
            load_bias: bias,
            start: lo.wrapping_add(bias),
            end: hi.wrapping_add(bias),
            entry: self.header.e_entry.wrapping_add(bias),
            phdr,
            phnum: u64::from(self.header.e_phnum),
            exec_ranges,
        };
        Ok(MappedImage { module, res })
    }

    /// Maps one PT_LOAD segment at `p_vaddr + bias`, zeroing its .bss part.
    fn map_segment(&self, ph: &ProgramHeader, bias: u64, page: u64) -> Result<(), LoadError> {
        let mut prot = 0;
        if ph.p_flags & PF_R != 0 {
            prot |= libc::PROT_READ;
        }
        if ph.p_flags & PF_W != 0 {
            prot |= libc::PROT_WRITE;
        }
        if ph.p_flags & PF_X != 0 {
            prot |= libc::PROT_EXEC;
        }
        if ph.p_memsz == 0 {
            return Ok(());
        }
        let seg_start = ph.p_vaddr.wrapping_add(bias);
        let page_start = round_down(seg_start, page);
        let file_end = seg_start + ph.p_filesz;
        let mem_end = seg_start + ph.p_memsz;
        let mut anon_start = page_start;
        if ph.p_filesz > 0 {
            let map_end = round_down(file_end + page - 1, page);
            // The last file page holds .bss bytes that must read as zero: make it writable
            // while clearing them.
            let tail_zero = ph.p_memsz > ph.p_filesz && file_end != map_end;
            let map_prot = if tail_zero {
                prot | libc::PROT_WRITE | libc::PROT_READ
            } else {
                prot
            };
            // SAFETY: [page_start, map_end) lies inside this module's reservation (it is within
            // [lo, hi) + bias, checked in `map`), which the loader owns, so MAP_FIXED replaces
            // only our own PROT_NONE pages.
            let p = unsafe {
                libc::mmap(
                    page_start as *mut libc::c_void,
                    (map_end - page_start) as usize,
                    map_prot,
                    libc::MAP_PRIVATE | libc::MAP_FIXED,
                    self.file.as_raw_fd(),
                    round_down(ph.p_offset, page) as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(self.map_error("a segment", last_errno()));
            }
            if tail_zero {
                // SAFETY: [file_end, map_end) is inside the private, writable file mapping just
                // made above; nothing else references it yet.
                unsafe {
                    std::ptr::write_bytes(file_end as *mut u8, 0, (map_end - file_end) as usize);
                }
                if map_prot != prot {
                    // SAFETY: changes protection of the mapping made above only.
                    let r = unsafe {
                        libc::mprotect(
                            page_start as *mut libc::c_void,
                            (map_end - page_start) as usize,
                            prot,
                        )
                    };
                    if r != 0 {
                        return Err(self.map_error("a segment", last_errno()));
                    }
                }
            }
            anon_start = map_end;
        }
        let anon_end = round_down(mem_end + page - 1, page);
        if anon_end > anon_start {
            // SAFETY: [anon_start, anon_end) is inside this module's reservation (see above).
            let p = unsafe {
                libc::mmap(
                    anon_start as *mut libc::c_void,
                    (anon_end - anon_start) as usize,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(self.map_error("a .bss segment", last_errno()));
            }
        }
        Ok(())
    }

    fn map_error(&self, what: &'static str, errno: i32) -> LoadError {
        LoadError::Map {
            path: show(&self.path),
            what,
            errno,
        }
    }

    fn fixed_error(&self, what: &'static str, start: u64, end: u64, errno: i32) -> LoadError {
        if errno == libc::EEXIST {
            LoadError::AddressInUse {
                path: show(&self.path),
                what,
                start,
                end,
            }
        } else {
            self.map_error(what, errno)
        }
    }
}

/// A module mapped into its reservation. Dropping it unmaps everything; [`MappedImage::keep`]
/// hands the mappings over for good.
#[derive(Debug)]
pub(crate) struct MappedImage {
    /// Where the module landed.
    pub(crate) module: MappedModule,
    res: Reservation,
}

impl MappedImage {
    /// Keeps the mappings (they are never unmapped by the loader after this).
    pub(crate) fn keep(self) {
        std::mem::forget(self.res);
    }
}

/// An address range the loader reserved with mmap; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

impl Reservation {
    /// Reserves `len` bytes (a page multiple) of `PROT_NONE`, `MAP_NORESERVE` memory where the
    /// kernel chooses. Returns the errno on failure.
    pub(crate) fn anywhere(len: u64) -> Result<Reservation, i32> {
        Self::reserve(0, len, 0)
    }

    /// Reserves exactly `[addr, addr + len)`, failing with EEXIST if any of it is in use.
    pub(crate) fn fixed(addr: u64, len: u64) -> Result<Reservation, i32> {
        let r = Self::reserve(addr, len, libc::MAP_FIXED_NOREPLACE)?;
        if r.addr != addr {
            // A kernel older than 4.17 treats MAP_FIXED_NOREPLACE as a hint.
            return Err(libc::EEXIST);
        }
        Ok(r)
    }

    fn reserve(addr: u64, len: u64, extra_flags: i32) -> Result<Reservation, i32> {
        let Ok(ulen) = usize::try_from(len) else {
            return Err(libc::ENOMEM);
        };
        if ulen == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: without MAP_FIXED the kernel never replaces existing mappings
        // (MAP_FIXED_NOREPLACE fails instead), so this cannot clobber any memory.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                ulen,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | extra_flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_errno());
        }
        Ok(Reservation {
            addr: p as u64,
            len,
        })
    }

    /// Shrinks the reservation to `[start, start + len)`, which must lie inside it, unmapping
    /// the rest.
    fn trim(self, start: u64, len: u64) -> Reservation {
        let (addr, end) = (self.addr, self.addr + self.len);
        std::mem::forget(self);
        debug_assert!(start >= addr && start + len <= end);
        unmap(addr, start - addr);
        unmap(start + len, end - (start + len));
        Reservation { addr: start, len }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        unmap(self.addr, self.len);
    }
}

/// munmap that ignores empty ranges and errors (used only on ranges the loader mapped).
pub(crate) fn unmap(addr: u64, len: u64) {
    if len == 0 {
        return;
    }
    // SAFETY: callers pass only ranges the loader itself mapped and no Rust reference points
    // into (guest memory); unmapping them invalidates nothing rgrind uses.
    unsafe {
        libc::munmap(addr as *mut libc::c_void, len as usize);
    }
}
