//! Tiny random-weight models for tests: every family and every weight dtype, small enough to
//! read in a snapshot, and a GGUF writer so they also travel through the real loader.
//!
//! Invariants: weights are a deterministic function of the seed; packed blocks get finite,
//! small f16 scales (random bytes elsewhere), so every dtype's dequantization is exercised.

use crate::Result;
use crate::families::{Family, Model, ModelSpec, gguf_name, roles};
use crate::load::WeightStore;
use crate::load::gguf::Gguf;
use half::f16;
use poot_ir::{DType, RoleKind, RopeLayout, WeightRole};
use std::path::{Path, PathBuf};

/// The tiny spec of a family: 2 layers, width 32, 4 query heads over 2 KV heads of width 8.
pub fn tiny_spec(family: Family) -> ModelSpec {
    ModelSpec {
        family,
        n_layers: 2,
        d_model: 32,
        d_ff: 256,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 8,
        vocab: 64,
        context: 64,
        rope_base: 10000.0,
        rope_layout: match family {
            Family::Llama => RopeLayout::Pairs,
            Family::Qwen2 => RopeLayout::Halves,
        },
        rope_dims: 8,
        norm_eps: 1e-5,
        tied_embeddings: family == Family::Llama,
    }
}

/// The dtype a tiny model stores `role` in (together the families cover every dtype).
pub fn tiny_dtype(family: Family, role: WeightRole) -> DType {
    use RoleKind::*;
    match (family, role.kind) {
        (_, AttnNorm | FfnNorm | OutputNorm | AttnQBias | AttnKBias | AttnVBias) => DType::F32,
        (_, TokenEmbd) => DType::Q8_0,
        (Family::Llama, AttnQ | AttnK | FfnGate) => DType::Q4_1,
        (Family::Llama, AttnV | AttnOutput) => DType::F16,
        (Family::Llama, FfnUp) => DType::Q4_0,
        (Family::Llama, FfnDown) => DType::Q4K,
        (Family::Qwen2, AttnQ | AttnK | AttnV | FfnUp) => DType::Q5_0,
        (Family::Qwen2, AttnOutput | FfnGate) => DType::Bf16,
        (Family::Qwen2, FfnDown) => DType::Q6K,
        (_, Output) => DType::F32,
    }
}

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Random bytes of a `[rows, k]` tensor of `dtype` with values of magnitude about `scale`.
pub fn random_tensor(rng: &mut Rng, dtype: DType, dims: &[usize], scale: f32) -> Vec<u8> {
    let n: usize = dims.iter().product();
    let f16b = |x: f32| f16::from_f32(x).to_le_bytes();
    match dtype {
        DType::F32 => (0..n)
            .flat_map(|_| (scale * rng.unit()).to_le_bytes())
            .collect(),
        DType::F16 => (0..n).flat_map(|_| f16b(scale * rng.unit())).collect(),
        DType::Bf16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(scale * rng.unit()).to_le_bytes())
            .collect(),
        _ => {
            let (per, size) = dtype.block();
            let mut out = Vec::with_capacity(n / per * size);
            for _ in 0..n / per {
                let mut b: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
                let mut put = |at: usize, x: f32| b[at..at + 2].copy_from_slice(&f16b(x));
                match dtype {
                    DType::Q4_0 => put(0, scale / 8.0 * rng.unit()),
                    DType::Q5_0 => put(0, scale / 16.0 * rng.unit()),
                    DType::Q8_0 => put(0, scale / 128.0 * rng.unit()),
                    DType::Q4_1 => {
                        put(0, scale / 8.0 * rng.unit().abs());
                        put(2, -scale * rng.unit().abs());
                    }
                    DType::Q4K => {
                        put(0, scale / 512.0 * rng.unit().abs());
                        put(2, scale / 64.0 * rng.unit().abs());
                    }
                    DType::Q6K => put(208, scale / 2048.0 * rng.unit()),
                    _ => {}
                }
                out.extend_from_slice(&b);
            }
            out
        }
    }
}

/// The tensors of a tiny model, by GGUF name.
pub fn tiny_tensors(spec: &ModelSpec, seed: u64) -> Vec<(String, DType, Vec<usize>, Vec<u8>)> {
    tiny_tensors_with(spec, seed, &[])
}

/// The tensors of a tiny model, by GGUF name, with the dtypes of `dtypes`' roles in place of
/// the tiny ones.
fn tiny_tensors_with(
    spec: &ModelSpec,
    seed: u64,
    dtypes: &[(RoleKind, DType)],
) -> Vec<(String, DType, Vec<usize>, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    roles(spec)
        .into_iter()
        .map(|(role, dims)| {
            let dtype = dtypes
                .iter()
                .find(|(k, _)| *k == role.kind)
                .map_or_else(|| tiny_dtype(spec.family, role), |&(_, d)| d);
            let is_norm = matches!(
                role.kind,
                RoleKind::AttnNorm | RoleKind::FfnNorm | RoleKind::OutputNorm
            );
            let bytes = if is_norm {
                (0..dims[0])
                    .flat_map(|_| (1.0 + 0.2 * rng.unit()).to_le_bytes())
                    .collect()
            } else {
                random_tensor(&mut rng, dtype, &dims, 0.5)
            };
            (gguf_name(role), dtype, dims, bytes)
        })
        .collect()
}

/// A tiny model of `family` in memory.
pub fn tiny_model(family: Family, seed: u64) -> Result<Model> {
    tiny_model_of(tiny_spec(family), seed)
}

/// A model of `spec` (a variation of a tiny spec) in memory, with the tiny dtypes.
pub fn tiny_model_of(spec: ModelSpec, seed: u64) -> Result<Model> {
    tiny_model_with(spec, seed, &[])
}

/// A model of `spec` in memory, with the dtypes of `dtypes`' roles in place of the tiny ones
/// (rows of the block formats must hold whole blocks).
pub fn tiny_model_with(spec: ModelSpec, seed: u64, dtypes: &[(RoleKind, DType)]) -> Result<Model> {
    let store = WeightStore::from_tensors(tiny_tensors_with(&spec, seed, dtypes));
    Model::bind(
        PathBuf::from(format!("tiny-{}", spec.family.name())),
        spec,
        store,
        gguf_name,
        None,
    )
}

/// A tiny qwen2 512 wide with a feed-forward layer 1536 wide whose gate and down projections
/// are Q6_K (a scale for each run of 16 codes) and its up Q8_0, heads 64 wide: the block
/// formats the other tiny configs' tiled matmuls lack. With two rows, its prefill chunks of
/// 20 tokens and more split the gate/up's `k` (one kernel, runs of 16 and 32) and its
/// chunks of 36 tokens and more the down's, in parts long enough for the tensor-core form
/// with coded weights (`lower::Products::TensorCores { coded: true }`).
pub fn wide_codes_model(seed: u64) -> Result<Model> {
    let spec = ModelSpec {
        d_model: 512,
        d_ff: 1536,
        head_dim: 64,
        rope_dims: 64,
        ..tiny_spec(Family::Qwen2)
    };
    let dtypes = [
        (RoleKind::FfnGate, DType::Q6K),
        (RoleKind::FfnUp, DType::Q8_0),
        (RoleKind::FfnDown, DType::Q6K),
    ];
    tiny_model_with(spec, seed, &dtypes)
}

/// The GGUF metadata of `spec` under architecture name `arch` (tests vary `arch`).
pub fn tiny_meta(spec: &ModelSpec, arch: &str) -> Vec<(String, MetaOut)> {
    let u = |k: &str, v: usize| (format!("{arch}.{k}"), MetaOut::U32(v as u32));
    let f = |k: &str, v: f32| (format!("{arch}.{k}"), MetaOut::F32(v));
    vec![
        (
            "general.architecture".to_string(),
            MetaOut::Str(arch.into()),
        ),
        u("block_count", spec.n_layers),
        u("embedding_length", spec.d_model),
        u("feed_forward_length", spec.d_ff),
        u("attention.head_count", spec.n_heads),
        u("attention.head_count_kv", spec.n_kv_heads),
        u("context_length", spec.context),
        f("rope.freq_base", spec.rope_base),
        f("attention.layer_norm_rms_epsilon", spec.norm_eps),
    ]
}

/// A GGUF v3 file of a tiny model, to load through `Model::load`.
pub fn tiny_gguf(family: Family, seed: u64) -> Vec<u8> {
    let spec = tiny_spec(family);
    write_gguf(&tiny_meta(&spec, family.name()), &tiny_tensors(&spec, seed))
}

/// A metadata value to write.
pub enum MetaOut {
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 8.
    Str(String),
}

/// Writes a GGUF v3 file (alignment 32) with `meta` and `tensors` (dims outermost first).
pub fn write_gguf(
    meta: &[(String, MetaOut)],
    tensors: &[(String, DType, Vec<usize>, Vec<u8>)],
) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend((x.len() as u64).to_le_bytes());
        b.extend(x.as_bytes());
    };
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        s(&mut b, k);
        match v {
            MetaOut::U32(x) => {
                b.extend(4u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            MetaOut::F32(x) => {
                b.extend(6u32.to_le_bytes());
                b.extend(x.to_le_bytes());
            }
            MetaOut::Str(x) => {
                b.extend(8u32.to_le_bytes());
                s(&mut b, x);
            }
        }
    }
    let mut offset = 0u64;
    for (name, dtype, dims, bytes) in tensors {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        for d in dims.iter().rev() {
            b.extend((*d as u64).to_le_bytes());
        }
        b.extend(ggml_id(*dtype).to_le_bytes());
        b.extend(offset.to_le_bytes());
        offset += (bytes.len() as u64).div_ceil(32) * 32;
    }
    b.resize(b.len().div_ceil(32) * 32, 0);
    for (_, _, _, bytes) in tensors {
        b.extend(bytes);
        b.resize(b.len().div_ceil(32) * 32, 0);
    }
    b
}

fn ggml_id(d: DType) -> u32 {
    (0..64)
        .find(|&i| crate::load::gguf::ggml_dtype(i) == Some(d))
        .unwrap_or(u32::MAX)
}

/// Loads GGUF bytes as a model (as `Model::load` would from a file).
pub fn load_gguf_bytes(name: &Path, bytes: Vec<u8>) -> Result<Model> {
    Model::from_gguf(Gguf::from_bytes(name, bytes)?)
}
