//! GGUF v2/v3 reader: header, metadata, tensor infos, aligned data, mapped with memmap2.
//!
//! Invariants: every read is bounds-checked against the file and reported as `Truncated`
//! with what was being read; tensor shapes are stored outermost first (GGUF lists the
//! innermost first); a tensor's bytes lie wholly inside the file; the store keeps the map.

use super::{Backing, TensorInfo, WeightStore};
use crate::{CompileError, Result};
use poot_ir::DType;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    /// Any unsigned integer.
    U64(u64),
    /// Any signed integer.
    I64(i64),
    /// Any float.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Str(String),
    /// An array.
    Array(Vec<Meta>),
}

/// A parsed GGUF file: metadata and a store of its tensors.
pub struct Gguf {
    /// The file.
    pub path: PathBuf,
    /// GGUF version.
    pub version: u32,
    /// Metadata by key.
    pub meta: BTreeMap<String, Meta>,
    /// The tensors.
    pub store: WeightStore,
}

/// The GGUF type id of each supported dtype.
pub fn ggml_dtype(id: u32) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        8 => DType::Q8_0,
        12 => DType::Q4K,
        14 => DType::Q6K,
        26 => DType::I32,
        30 => DType::Bf16,
        _ => return None,
    })
}

fn ggml_name(id: u32) -> &'static str {
    const NAMES: [&str; 31] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
        "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    ];
    NAMES.get(id as usize).copied().unwrap_or("unknown")
}

struct Reader<'a> {
    path: &'a Path,
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(CompileError::Truncated {
                path: self.path.to_path_buf(),
                what: what.to_string(),
                needed: self.at as u64 + n as u64,
                len: self.b.len() as u64,
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let s = self.take(usize::try_from(n).unwrap_or(usize::MAX), what)?;
        Ok(String::from_utf8_lossy(s).into_owned())
    }
    fn value(&mut self, ty: u32, key: &str) -> Result<Meta> {
        let what = format!("metadata `{key}`");
        Ok(match ty {
            0 => Meta::U64(self.take(1, &what)?[0] as u64),
            1 => Meta::I64(self.take(1, &what)?[0] as i8 as i64),
            2 => {
                let s = self.take(2, &what)?;
                Meta::U64(u16::from_le_bytes([s[0], s[1]]) as u64)
            }
            3 => {
                let s = self.take(2, &what)?;
                Meta::I64(i16::from_le_bytes([s[0], s[1]]) as i64)
            }
            4 => Meta::U64(self.u32(&what)? as u64),
            5 => Meta::I64(self.u32(&what)? as i32 as i64),
            6 => Meta::F64(f32::from_bits(self.u32(&what)?) as f64),
            7 => Meta::Bool(self.take(1, &what)?[0] != 0),
            8 => Meta::Str(self.string(&what)?),
            9 => {
                let ety = self.u32(&what)?;
                let n = self.u64(&what)?;
                // Each element takes at least one byte: a count past the file is truncation.
                if n > (self.b.len() - self.at) as u64 {
                    self.take(usize::MAX, &what)?;
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(ety, key)?);
                }
                Meta::Array(items)
            }
            10 => Meta::U64(self.u64(&what)?),
            11 => Meta::I64(self.u64(&what)? as i64),
            12 => Meta::F64(f64::from_bits(self.u64(&what)?)),
            other => {
                return Err(CompileError::BadFormat {
                    path: self.path.to_path_buf(),
                    format: "GGUF",
                    detail: format!("metadata `{key}` has unknown value type {other}"),
                });
            }
        })
    }
}

impl Gguf {
    /// Opens and parses `path`.
    pub fn open(path: &Path) -> Result<Gguf> {
        let io = |source| CompileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and the file is not modified while poot reads it.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Gguf::parse(path, Backing::Mapped(map))
    }

    /// Parses GGUF bytes already in memory (tests and fuzzing).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Gguf> {
        Gguf::parse(path, Backing::Owned(bytes))
    }

    fn parse(path: &Path, backing: Backing) -> Result<Gguf> {
        let b = backing.bytes();
        let mut r = Reader { path, b, at: 0 };
        let magic = r.take(4, "magic")?;
        if magic != b"GGUF" {
            return Err(CompileError::BadFormat {
                path: path.to_path_buf(),
                format: "GGUF",
                detail: format!(
                    "magic is {:?}, expected \"GGUF\"",
                    String::from_utf8_lossy(magic)
                ),
            });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(CompileError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
            });
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        let mut meta = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let ty = r.u32("metadata type")?;
            let v = r.value(ty, &key)?;
            meta.insert(key, v);
        }
        let mut infos = Vec::new();
        for _ in 0..n_tensors {
            let name = r.string("tensor name")?;
            let what = format!("tensor info of `{name}`");
            let nd = r.u32(&what)?;
            if nd > 8 {
                return Err(CompileError::BadFormat {
                    path: path.to_path_buf(),
                    format: "GGUF",
                    detail: format!("tensor `{name}` has {nd} dimensions"),
                });
            }
            let mut dims = (0..nd)
                .map(|_| r.u64(&what).map(|d| d as usize))
                .collect::<Result<Vec<_>>>()?;
            dims.reverse();
            let ty = r.u32(&what)?;
            let offset = r.u64(&what)?;
            infos.push((name, dims, ty, offset));
        }
        let align = match meta.get("general.alignment") {
            Some(Meta::U64(a)) if *a > 0 && a.is_power_of_two() => *a as usize,
            None => 32,
            Some(other) => {
                return Err(CompileError::Metadata {
                    path: path.to_path_buf(),
                    key: "general.alignment".into(),
                    problem: format!("is {other:?}, expected a power of two"),
                });
            }
        };
        let data = r.at.div_ceil(align) * align;
        let mut tensors = BTreeMap::new();
        for (name, dims, ty, offset) in infos {
            let dtype = ggml_dtype(ty).ok_or_else(|| CompileError::UnsupportedType {
                path: path.to_path_buf(),
                tensor: name.clone(),
                kind: format!("{} (GGUF type {ty})", ggml_name(ty)),
            })?;
            let numel = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            let len = numel
                .filter(|_| dims.last().is_some_and(|&k| k % dtype.block().0 == 0))
                .and_then(|n| dtype.bytes_for(n))
                .ok_or_else(|| CompileError::BadFormat {
                    path: path.to_path_buf(),
                    format: "GGUF",
                    detail: format!("tensor `{name}` of {dtype} has impossible shape {dims:?}"),
                })?;
            let start = data as u64 + offset;
            if start + len as u64 > b.len() as u64 {
                return Err(CompileError::Truncated {
                    path: path.to_path_buf(),
                    what: format!("data of tensor `{name}`"),
                    needed: start + len as u64,
                    len: b.len() as u64,
                });
            }
            let info = TensorInfo {
                dtype,
                dims,
                offset: start as usize,
                len,
            };
            tensors.insert(name, info);
        }
        Ok(Gguf {
            path: path.to_path_buf(),
            version,
            meta,
            store: WeightStore::new(backing, tensors),
        })
    }

    fn meta_err(&self, key: &str, problem: &str) -> CompileError {
        CompileError::Metadata {
            path: self.path.clone(),
            key: key.to_string(),
            problem: problem.to_string(),
        }
    }

    /// A string metadata value.
    pub fn str(&self, key: &str) -> Result<&str> {
        match self.meta.get(key) {
            Some(Meta::Str(s)) => Ok(s),
            Some(_) => Err(self.meta_err(key, "is not a string")),
            None => Err(self.meta_err(key, "is missing")),
        }
    }

    /// An unsigned integer metadata value.
    pub fn uint(&self, key: &str) -> Result<u64> {
        match self.meta.get(key) {
            Some(Meta::U64(v)) => Ok(*v),
            Some(Meta::I64(v)) if *v >= 0 => Ok(*v as u64),
            Some(_) => Err(self.meta_err(key, "is not an unsigned integer")),
            None => Err(self.meta_err(key, "is missing")),
        }
    }

    /// A float metadata value.
    pub fn float(&self, key: &str) -> Result<f64> {
        match self.meta.get(key) {
            Some(Meta::F64(v)) => Ok(*v),
            Some(_) => Err(self.meta_err(key, "is not a float")),
            None => Err(self.meta_err(key, "is missing")),
        }
    }

    /// An array metadata value.
    pub fn array(&self, key: &str) -> Result<&[Meta]> {
        match self.meta.get(key) {
            Some(Meta::Array(v)) => Ok(v),
            Some(_) => Err(self.meta_err(key, "is not an array")),
            None => Err(self.meta_err(key, "is missing")),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key)?
            .iter()
            .map(|m| match m {
                Meta::Str(s) => Ok(s.as_str()),
                _ => Err(self.meta_err(key, "holds a non-string")),
            })
            .collect()
    }
}
