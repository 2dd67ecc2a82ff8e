//! safetensors reader (plus the `config.json` beside it), mapped with memmap2.
//!
//! Invariants: the JSON header is bounds-checked and every tensor's byte range must lie in
//! the data section with the length its dtype and shape imply.

use super::{Backing, TensorInfo, WeightStore};
use crate::{CompileError, Result};
use poot_ir::DType;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(serde::Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

/// Opens `path` (a `.safetensors` file) as a weight store.
pub fn open(path: &Path) -> Result<WeightStore> {
    let io = |source| CompileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and the file is not modified while poot reads it.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    parse(path, Backing::Mapped(map))
}

/// Parses safetensors bytes already in memory.
pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<WeightStore> {
    parse(path, Backing::Owned(bytes))
}

fn parse(path: &Path, backing: Backing) -> Result<WeightStore> {
    let b = backing.bytes();
    let trunc = |what: &str, needed: u64| CompileError::Truncated {
        path: path.to_path_buf(),
        what: what.to_string(),
        needed,
        len: b.len() as u64,
    };
    let bad = |detail: String| CompileError::BadFormat {
        path: path.to_path_buf(),
        format: "safetensors",
        detail,
    };
    let head = b.get(..8).ok_or_else(|| trunc("header length", 8))?;
    let n = u64::from_le_bytes(head.try_into().map_err(|_| trunc("header length", 8))?);
    let end = 8u64.saturating_add(n);
    let json = b
        .get(8..usize::try_from(end).unwrap_or(usize::MAX))
        .ok_or_else(|| trunc("JSON header", end))?;
    let entries: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let data = end as usize;
    let mut tensors = BTreeMap::new();
    for (name, v) in entries {
        if name == "__metadata__" {
            continue;
        }
        let e: Entry = serde_json::from_value(v).map_err(|e| bad(format!("`{name}`: {e}")))?;
        let dtype = match e.dtype.as_str() {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::Bf16,
            "I32" => DType::I32,
            "U8" => DType::U8,
            "BOOL" => DType::Bool,
            other => {
                return Err(CompileError::UnsupportedType {
                    path: path.to_path_buf(),
                    tensor: name,
                    kind: other.to_string(),
                });
            }
        };
        let [lo, hi] = e.data_offsets;
        let want = e.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if want.and_then(|n| dtype.bytes_for(n)) != Some(hi.saturating_sub(lo)) || hi < lo {
            return Err(bad(format!(
                "`{name}` spans bytes {lo}..{hi}, which does not fit {dtype}{:?}",
                e.shape
            )));
        }
        if data + hi > b.len() {
            return Err(trunc(
                &format!("data of tensor `{name}`"),
                (data + hi) as u64,
            ));
        }
        let info = TensorInfo {
            dtype,
            dims: e.shape,
            offset: data + lo,
            len: hi - lo,
        };
        tensors.insert(name, info);
    }
    Ok(WeightStore::new(backing, tensors))
}
