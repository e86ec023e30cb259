//! Call stacks of the guest, unwound by its modules' call-frame information (`.eh_frame`),
//! with the frame-pointer chain where a module has none; for `VALGRIND_PRINTF_BACKTRACE`.
//!
//! Built per request (rare): each module's `.eh_frame` is read again, and the FDE of an
//! address found by a linear search of the section.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
    X86_64,
};
use object::{Object, ObjectSection};

use super::{ModuleInfo, ModuleSource};

/// The registers unwinding needs, at one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The instruction address: where the thread is, in the innermost frame, else the
    /// return address.
    pub pc: u64,
    /// rsp.
    pub sp: u64,
    /// rbp.
    pub fp: u64,
}

/// One module's call-frame information.
struct Cfi {
    bias: u64,
    ranges: Vec<(u64, u64)>,
    eh_frame: Vec<u8>,
    /// Link-time addresses of `.eh_frame` and `.text` (its pointer encodings are relative to
    /// them).
    eh_frame_addr: u64,
    text_addr: u64,
}

/// Unwinds call stacks through the modules it was built from.
pub struct Unwinder {
    modules: Vec<Cfi>,
}

fn cfi_of(info: &ModuleInfo) -> Option<Cfi> {
    let image = match &info.source {
        ModuleSource::File => std::fs::read(&info.path).ok()?,
        ModuleSource::Memory(bytes) => bytes.clone(),
    };
    let file = object::File::parse(&*image).ok()?;
    let section = file.section_by_name(".eh_frame")?;
    Some(Cfi {
        bias: info.load_bias,
        ranges: info.ranges.clone(),
        eh_frame: section.data().ok()?.to_vec(),
        eh_frame_addr: section.address(),
        text_addr: file.section_by_name(".text").map_or(0, |s| s.address()),
    })
}

impl Unwinder {
    /// Reads the call-frame information of `modules` (those without any are unwound by
    /// their frame pointers).
    pub fn new(modules: &[ModuleInfo]) -> Self {
        Self {
            modules: modules.iter().filter_map(cfi_of).collect(),
        }
    }

    /// The frame that called `f`, or `None` at the stack's end. `innermost`: `f.pc` is where
    /// the thread is (else a return address, looked up one byte before). `read` reads a
    /// guest word.
    pub fn caller(
        &self,
        f: Frame,
        innermost: bool,
        read: &dyn Fn(u64) -> Option<u64>,
    ) -> Option<Frame> {
        let at = if innermost {
            f.pc
        } else {
            f.pc.wrapping_sub(1)
        };
        let by_cfi = self
            .modules
            .iter()
            .find(|m| m.ranges.iter().any(|&(s, e)| (s..e).contains(&at)))
            .and_then(|m| m.caller(f, at, read));
        let caller = match by_cfi {
            Some(c) => c,
            // No call-frame information: the frame-pointer chain.
            None if f.fp > f.sp => Frame {
                pc: read(f.fp.wrapping_add(8))?,
                sp: f.fp.wrapping_add(16),
                fp: read(f.fp)?,
            },
            None => return None,
        };
        // A frame further up lies higher on the stack; anything else is the end of it.
        (caller.pc != 0 && caller.sp > f.sp).then_some(caller)
    }

    /// The instruction addresses of the call stack from `f` outwards, at most `max`.
    pub fn backtrace(&self, f: Frame, max: usize, read: &dyn Fn(u64) -> Option<u64>) -> Vec<u64> {
        let mut pcs = vec![f.pc];
        let mut cur = f;
        while pcs.len() < max {
            match self.caller(cur, pcs.len() == 1, read) {
                Some(c) => {
                    pcs.push(c.pc);
                    cur = c;
                }
                None => break,
            }
        }
        pcs
    }
}

impl Cfi {
    fn caller(&self, f: Frame, at: u64, read: &dyn Fn(u64) -> Option<u64>) -> Option<Frame> {
        let section = EhFrame::new(&self.eh_frame, LittleEndian);
        let bases = BaseAddresses::default()
            .set_eh_frame(self.eh_frame_addr)
            .set_text(self.text_addr);
        let mut ctx = UnwindContext::new();
        let row = section
            .unwind_info_for_address(
                &bases,
                &mut ctx,
                at.wrapping_sub(self.bias),
                EhFrame::cie_from_offset,
            )
            .ok()?;
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                let base = match *register {
                    X86_64::RSP => f.sp,
                    X86_64::RBP => f.fp,
                    _ => return None,
                };
                base.wrapping_add(*offset as u64)
            }
            CfaRule::Expression(_) => return None,
        };
        let saved = |rule: RegisterRule<usize>| match rule {
            RegisterRule::Offset(o) => read(cfa.wrapping_add(o as u64)),
            _ => None,
        };
        let pc = saved(row.register(X86_64::RA)?)?;
        // rbp keeps its value unless the frame saved it.
        let fp = row.register(X86_64::RBP).and_then(saved).unwrap_or(f.fp);
        Some(Frame { pc, sp: cfa, fp })
    }
}
