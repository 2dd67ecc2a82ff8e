//! Checkpoint readers and the weight store they fill.
//!
//! Invariant: a `WeightStore` only holds tensors whose bytes lie inside its backing and whose
//! length matches dtype and shape, so `view` never fails for a listed name.

pub mod gguf;
pub mod safetensors;

use poot_eval::WeightView;
use std::collections::BTreeMap;

/// Where a store's bytes live.
pub enum Backing {
    /// A read-only file map.
    Mapped(memmap2::Mmap),
    /// Bytes in memory.
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// One tensor's place in the backing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: poot_ir::DType,
    /// Shape, outermost first.
    pub dims: Vec<usize>,
    /// Byte offset in the backing.
    pub offset: usize,
    /// Byte length.
    pub len: usize,
}

/// Tensors by checkpoint name over one backing.
pub struct WeightStore {
    backing: Backing,
    tensors: BTreeMap<String, TensorInfo>,
}

impl WeightStore {
    fn new(backing: Backing, tensors: BTreeMap<String, TensorInfo>) -> WeightStore {
        WeightStore { backing, tensors }
    }

    /// A store of in-memory tensors (tests and tiny configs): `(name, dtype, dims, bytes)`.
    pub fn from_tensors(items: Vec<(String, poot_ir::DType, Vec<usize>, Vec<u8>)>) -> WeightStore {
        let mut bytes = Vec::new();
        let mut tensors = BTreeMap::new();
        for (name, dtype, dims, b) in items {
            let info = TensorInfo {
                dtype,
                dims,
                offset: bytes.len(),
                len: b.len(),
            };
            bytes.extend_from_slice(&b);
            tensors.insert(name, info);
        }
        WeightStore::new(Backing::Owned(bytes), tensors)
    }

    /// The tensor infos by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    /// The info of `name`.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name)
    }

    /// A borrowed view of `name`.
    pub fn view(&self, name: &str) -> Option<WeightView<'_>> {
        let t = self.tensors.get(name)?;
        Some(WeightView {
            dtype: t.dtype,
            dims: &t.dims,
            bytes: &self.backing.bytes()[t.offset..t.offset + t.len],
        })
    }
}
