//! The guest's mapped ELF modules, for symbolisation, read from `/proc/self/maps` (guest and
//! rgrind share the process). Modules are remembered once seen, so code that was unmapped
//! before the end (dlclose) still symbolises.
//!
//! rgrind's own executable is left out: no guest code runs there.
use dumper::ModuleInfo;
use std::collections::BTreeMap;

/// Address ranges `[start, end)`.
type Ranges = Vec<(u64, u64)>;

#[derive(Default)]
pub struct Modules {
    /// Path -> (load bias, mapped ranges).
    seen: BTreeMap<String, (u64, Vec<(u64, u64)>)>,
    vdso: Option<(u64, u64)>,
    /// Ranges known to be covered, to re-read the maps only for new code.
    covered: Vec<(u64, u64)>,
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// `(p_offset, p_vaddr)` of the first PT_LOAD of an ELF64 image's header bytes.
fn first_load(head: &[u8]) -> Option<(u64, u64)> {
    if head.get(..4)? != b"\x7fELF" {
        return None;
    }
    let phoff = read_u64(head, 0x20)? as usize;
    let phentsize = read_u16(head, 0x36)? as usize;
    let phnum = read_u16(head, 0x38)? as usize;
    (0..phnum).find_map(|i| {
        let ph = phoff + i * phentsize;
        let ty = u32::from_le_bytes(head.get(ph..ph + 4)?.try_into().ok()?);
        (ty == 1).then(|| Some((read_u64(head, ph + 8)?, read_u64(head, ph + 16)?)))?
    })
}

fn file_head(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = f.read(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

impl Modules {
    /// Whether `addr` lies in a module already recorded.
    pub fn covers(&self, addr: u64) -> bool {
        self.covered.iter().any(|&(s, e)| (s..e).contains(&addr))
    }

    /// Re-reads `/proc/self/maps` and records every module mapped now.
    pub fn refresh(&mut self) {
        let Ok(maps) = std::fs::read_to_string("/proc/thread-self/maps") else {
            return;
        };
        let own = std::env::current_exe()
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        // path -> (ranges, start of the mapping at file offset 0)
        let mut now: BTreeMap<String, (Ranges, Ranges)> = BTreeMap::new();
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
            if path == "[vdso]" {
                self.vdso = Some((s, e));
                self.covered.push((s, e));
                continue;
            }
            if !path.starts_with('/') || Some(path) == own.as_deref() {
                continue;
            }
            let entry = now.entry(path.to_string()).or_default();
            entry.0.push((s, e));
            entry.1.push((off, s));
        }
        for (path, (ranges, offs)) in now {
            let Some(head) = file_head(&path) else {
                continue;
            };
            let Some((p_off, p_vaddr)) = first_load(&head) else {
                continue;
            };
            let page = p_off & !0xfff;
            let Some(&(_, start)) = offs.iter().find(|&&(o, _)| o == page) else {
                continue;
            };
            let bias = start.wrapping_sub(p_vaddr & !0xfff);
            self.covered.extend(ranges.iter().copied());
            let e = self.seen.entry(path).or_insert((bias, Vec::new()));
            if e.0 != bias {
                *e = (bias, Vec::new());
            }
            for r in ranges {
                if !e.1.contains(&r) {
                    e.1.push(r);
                }
            }
        }
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
