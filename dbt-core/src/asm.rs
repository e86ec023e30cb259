//! The assembler translations are emitted with: dynasmrt's `VecAssembler`, which also keeps
//! the references to its dynamic labels, so that a translation emitted as one piece can be
//! placed in two (`translate::split`). Emitted code refers to itself only through labels
//! (anything else it reaches by absolute address, or, like the counters, from the hot part
//! only), so these references are all that placing the parts apart must re-encode.
use dynasmrt::components::PatchLoc;
use dynasmrt::x64::X64Relocation;
use dynasmrt::{
    AssemblyOffset, DynamicLabel, DynasmApi, DynasmError, DynasmLabelApi, VecAssembler,
};

pub struct Asm {
    inner: VecAssembler<X64Relocation>,
    label_refs: Vec<(PatchLoc<X64Relocation>, DynamicLabel)>,
}

/// A reference from emitted code to one of its labels: where the field is and what it holds.
pub struct LabelRef {
    pub patch: PatchLoc<X64Relocation>,
    /// The label's offset.
    pub target: usize,
}

impl Asm {
    /// An assembler for code that will start at `base`.
    pub fn new(base: usize) -> Asm {
        Asm {
            inner: VecAssembler::new(base),
            label_refs: Vec::new(),
        }
    }

    pub fn new_dynamic_label(&mut self) -> DynamicLabel {
        self.inner.new_dynamic_label()
    }

    /// The code, with every label reference resolved.
    pub fn finalize(self) -> Result<Vec<u8>, DynasmError> {
        self.inner.finalize()
    }

    /// `finalize`, and the references to labels whose field lies on the other side of `cut`
    /// from the label.
    pub fn finalize_with_crossing(
        self,
        cut: usize,
    ) -> Result<(Vec<u8>, Vec<LabelRef>), DynasmError> {
        let mut crossing = Vec::new();
        for (patch, label) in self.label_refs {
            let target = self.inner.labels().resolve_dynamic(label)?.0;
            if (patch.range(0).start < cut) != (target < cut) {
                crossing.push(LabelRef { patch, target });
            }
        }
        Ok((self.inner.finalize()?, crossing))
    }
}

impl Extend<u8> for Asm {
    fn extend<T: IntoIterator<Item = u8>>(&mut self, iter: T) {
        self.inner.extend(iter)
    }
}

impl<'a> Extend<&'a u8> for Asm {
    fn extend<T: IntoIterator<Item = &'a u8>>(&mut self, iter: T) {
        self.inner.extend(iter)
    }
}

impl DynasmApi for Asm {
    fn offset(&self) -> AssemblyOffset {
        self.inner.offset()
    }
    fn push(&mut self, byte: u8) {
        self.inner.push(byte)
    }
    fn align(&mut self, alignment: usize, with: u8) {
        self.inner.align(alignment, with)
    }
}

/// The relocations to static labels, passed on as they are (local labels never cross
/// a translation's parts: each is defined and used within one emitted sequence).
macro_rules! delegate_static_relocations {
    ($($name:ident),*) => {$(
        fn $name(
            &mut self,
            label: &'static str,
            target_offset: isize,
            field_offset: u8,
            ref_offset: u8,
            kind: X64Relocation,
        ) {
            self.inner
                .$name(label, target_offset, field_offset, ref_offset, kind)
        }
    )*};
}

impl DynasmLabelApi for Asm {
    type Relocation = X64Relocation;

    fn local_label(&mut self, name: &'static str) {
        self.inner.local_label(name)
    }
    fn global_label(&mut self, name: &'static str) {
        self.inner.global_label(name)
    }
    fn dynamic_label(&mut self, id: DynamicLabel) {
        self.inner.dynamic_label(id)
    }
    delegate_static_relocations!(forward_relocation, backward_relocation, global_relocation);
    fn dynamic_relocation(
        &mut self,
        id: DynamicLabel,
        target_offset: isize,
        field_offset: u8,
        ref_offset: u8,
        kind: X64Relocation,
    ) {
        let at = self.inner.offset();
        self.label_refs.push((
            PatchLoc::new(at, target_offset, field_offset, ref_offset, kind),
            id,
        ));
        self.inner
            .dynamic_relocation(id, target_offset, field_offset, ref_offset, kind)
    }
    fn value_relocation(
        &mut self,
        value: usize,
        field_offset: u8,
        ref_offset: u8,
        kind: X64Relocation,
    ) {
        self.inner
            .value_relocation(value, field_offset, ref_offset, kind)
    }
}
