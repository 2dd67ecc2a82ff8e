//! Model families: what a checkpoint's metadata means, which tensor plays which role, and the
//! shape every tensor must have.
//!
//! Invariants: a loaded `Model` binds every role its trace reads to a tensor of exactly the
//! expected shape (outermost first) and a float or packed dtype; llama ties the output head to
//! the embedding when the checkpoint has no `output.weight`.

mod decoder;

pub use decoder::{StepShape, trace};

use crate::load::gguf::Gguf;
use crate::load::{WeightStore, safetensors};
use crate::tokenizer::TextCodec;
use crate::{CompileError, Result};
use poot_ir::{RoleKind, RopeLayout, Type, WeightRole};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A supported architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Llama (SmolLM2): no biases, tied or separate head.
    Llama,
    /// Qwen2: Q/K/V biases, NeoX rope, separate head.
    Qwen2,
}

impl Family {
    /// The family for an architecture name.
    pub fn from_arch(arch: &str) -> Option<Family> {
        match arch {
            "llama" => Some(Family::Llama),
            "qwen2" => Some(Family::Qwen2),
            _ => None,
        }
    }
    /// Its name in traces.
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
        }
    }
    /// True when Q, K and V projections have biases.
    pub fn qkv_bias(self) -> bool {
        self == Family::Qwen2
    }
}

/// The dimensions and numerics of a decoder model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// Architecture.
    pub family: Family,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Embedding width.
    pub d_model: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// Rope frequency base.
    pub rope_base: f32,
    /// Which pairs rope rotates in this checkpoint's layout.
    pub rope_layout: RopeLayout,
    /// Rotated dimensions per head.
    pub rope_dims: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Output head is the embedding table.
    pub tied_embeddings: bool,
}

/// A loaded checkpoint: spec, weights, the role -> tensor map, and its text codec.
pub struct Model {
    /// Where it came from.
    pub path: PathBuf,
    /// Dimensions and numerics.
    pub spec: ModelSpec,
    /// The tensors.
    pub store: WeightStore,
    /// Which tensor plays each role.
    pub map: BTreeMap<WeightRole, String>,
    /// Tokenizer and chat template.
    pub codec: Option<TextCodec>,
}

/// Every role a spec's trace reads, with its expected shape (outermost first).
pub fn roles(spec: &ModelSpec) -> Vec<(WeightRole, Vec<usize>)> {
    let (d, f, v) = (spec.d_model, spec.d_ff, spec.vocab);
    let (q, kv) = (
        spec.n_heads * spec.head_dim,
        spec.n_kv_heads * spec.head_dim,
    );
    let g = |kind| WeightRole { kind, layer: None };
    let mut out = vec![
        (g(RoleKind::TokenEmbd), vec![v, d]),
        (g(RoleKind::OutputNorm), vec![d]),
    ];
    if !spec.tied_embeddings {
        out.push((g(RoleKind::Output), vec![v, d]));
    }
    for l in 0..spec.n_layers as u32 {
        let r = |kind| WeightRole {
            kind,
            layer: Some(l),
        };
        out.extend([
            (r(RoleKind::AttnNorm), vec![d]),
            (r(RoleKind::AttnQ), vec![q, d]),
            (r(RoleKind::AttnK), vec![kv, d]),
            (r(RoleKind::AttnV), vec![kv, d]),
            (r(RoleKind::AttnOutput), vec![d, q]),
            (r(RoleKind::FfnNorm), vec![d]),
            (r(RoleKind::FfnGate), vec![f, d]),
            (r(RoleKind::FfnUp), vec![f, d]),
            (r(RoleKind::FfnDown), vec![d, f]),
        ]);
        if spec.family.qkv_bias() {
            out.extend([
                (r(RoleKind::AttnQBias), vec![q]),
                (r(RoleKind::AttnKBias), vec![kv]),
                (r(RoleKind::AttnVBias), vec![kv]),
            ]);
        }
    }
    out
}

/// The GGUF tensor name of a role.
pub fn gguf_name(r: WeightRole) -> String {
    let (base, suffix) = match r.kind {
        RoleKind::AttnQBias => ("attn_q", "bias"),
        RoleKind::AttnKBias => ("attn_k", "bias"),
        RoleKind::AttnVBias => ("attn_v", "bias"),
        k => (k.name(), "weight"),
    };
    match r.layer {
        Some(l) => format!("blk.{l}.{base}.{suffix}"),
        None => format!("{base}.{suffix}"),
    }
}

/// The Hugging Face tensor name of a role.
pub fn hf_name(r: WeightRole) -> String {
    let name = match r.kind {
        RoleKind::TokenEmbd => return "model.embed_tokens.weight".into(),
        RoleKind::OutputNorm => return "model.norm.weight".into(),
        RoleKind::Output => return "lm_head.weight".into(),
        RoleKind::AttnNorm => "input_layernorm.weight",
        RoleKind::AttnQ => "self_attn.q_proj.weight",
        RoleKind::AttnK => "self_attn.k_proj.weight",
        RoleKind::AttnV => "self_attn.v_proj.weight",
        RoleKind::AttnQBias => "self_attn.q_proj.bias",
        RoleKind::AttnKBias => "self_attn.k_proj.bias",
        RoleKind::AttnVBias => "self_attn.v_proj.bias",
        RoleKind::AttnOutput => "self_attn.o_proj.weight",
        RoleKind::FfnNorm => "post_attention_layernorm.weight",
        RoleKind::FfnGate => "mlp.gate_proj.weight",
        RoleKind::FfnUp => "mlp.up_proj.weight",
        RoleKind::FfnDown => "mlp.down_proj.weight",
    };
    format!("model.layers.{}.{name}", r.layer.unwrap_or(0))
}

impl Model {
    /// Loads a GGUF file, or a folder / `.safetensors` file with `config.json` beside it.
    pub fn load(path: &Path) -> Result<Model> {
        let is_gguf = path.extension().is_some_and(|e| e == "gguf");
        if is_gguf {
            Model::from_gguf(Gguf::open(path)?)
        } else {
            Model::from_hf(path)
        }
    }

    /// A model over a parsed GGUF file.
    pub fn from_gguf(g: Gguf) -> Result<Model> {
        let arch = g.str("general.architecture")?.to_string();
        let family = Family::from_arch(&arch).ok_or_else(|| CompileError::UnknownArchitecture {
            path: g.path.clone(),
            arch: arch.clone(),
        })?;
        let key = |k: &str| format!("{arch}.{k}");
        let n_heads = g.uint(&key("attention.head_count"))? as usize;
        let d_model = g.uint(&key("embedding_length"))? as usize;
        let head_dim = d_model / n_heads.max(1);
        let vocab = match g.store.info("token_embd.weight") {
            Some(t) => t.dims[0],
            None => g.array("tokenizer.ggml.tokens")?.len(),
        };
        let spec = ModelSpec {
            family,
            n_layers: g.uint(&key("block_count"))? as usize,
            d_model,
            d_ff: g.uint(&key("feed_forward_length"))? as usize,
            n_heads,
            n_kv_heads: g
                .uint(&key("attention.head_count_kv"))
                .unwrap_or(n_heads as u64) as usize,
            head_dim,
            vocab,
            context: g.uint(&key("context_length"))? as usize,
            rope_base: g.float(&key("rope.freq_base")).unwrap_or(10000.0) as f32,
            // The GGUF converter permutes llama's Q/K rows so rope rotates adjacent pairs.
            rope_layout: match family {
                Family::Llama => RopeLayout::Pairs,
                Family::Qwen2 => RopeLayout::Halves,
            },
            rope_dims: g
                .uint(&key("rope.dimension_count"))
                .unwrap_or(head_dim as u64) as usize,
            norm_eps: g.float(&key("attention.layer_norm_rms_epsilon"))? as f32,
            tied_embeddings: g.store.info("output.weight").is_none(),
        };
        let codec = match g.meta.contains_key("tokenizer.ggml.model") {
            true => Some(TextCodec::from_gguf(&g)?),
            false => None,
        };
        Model::bind(g.path.clone(), spec, g.store, gguf_name, codec)
    }

    /// A model from Hugging Face files: `config.json`, `model.safetensors`, `tokenizer.json`.
    pub fn from_hf(path: &Path) -> Result<Model> {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(Path::new("."))
        };
        let file = if path.is_dir() {
            dir.join("model.safetensors")
        } else {
            path.to_path_buf()
        };
        let cfg_path = dir.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).map_err(|source| CompileError::Io {
            path: cfg_path.clone(),
            source,
        })?;
        let spec = spec_from_config(&cfg_path, &text)?;
        let store = safetensors::open(&file)?;
        let spec = ModelSpec {
            tied_embeddings: store.info("lm_head.weight").is_none(),
            ..spec
        };
        let tok = dir.join("tokenizer.json");
        let codec = if tok.exists() {
            Some(TextCodec::from_files(dir)?)
        } else {
            None
        };
        Model::bind(file, spec, store, hf_name, codec)
    }

    /// Binds every role of `spec` to the store's tensor `name(role)`, checking shapes.
    pub fn bind(
        path: PathBuf,
        spec: ModelSpec,
        store: WeightStore,
        name: fn(WeightRole) -> String,
        codec: Option<TextCodec>,
    ) -> Result<Model> {
        let mut map = BTreeMap::new();
        for (role, expected) in roles(&spec) {
            let tensor = name(role);
            let info = store
                .info(&tensor)
                .ok_or_else(|| CompileError::MissingTensor {
                    path: path.clone(),
                    tensor: tensor.clone(),
                })?;
            if info.dims != expected {
                return Err(CompileError::TensorShape {
                    path: path.clone(),
                    tensor,
                    expected,
                    found: info.dims.clone(),
                });
            }
            if !info.dtype.is_float() {
                return Err(CompileError::UnsupportedType {
                    path: path.clone(),
                    tensor,
                    kind: info.dtype.to_string(),
                });
            }
            map.insert(role, tensor);
        }
        Ok(Model {
            path,
            spec,
            store,
            map,
            codec,
        })
    }

    /// The type of the tensor bound to `role` (the tied head reads the embedding).
    pub fn weight_type(&self, role: WeightRole) -> Option<Type> {
        let info = self.store.info(self.map.get(&role)?)?;
        Some(Type::new(info.dtype, info.dims.clone()))
    }

    /// Borrowed views of every bound weight, for `poot_eval::Inputs`.
    pub fn weight_views(&self) -> std::collections::HashMap<WeightRole, poot_eval::WeightView<'_>> {
        self.map
            .iter()
            .filter_map(|(r, n)| Some((*r, self.store.view(n)?)))
            .collect()
    }
}

#[derive(serde::Deserialize)]
struct HfConfig {
    model_type: String,
    num_hidden_layers: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    vocab_size: usize,
    max_position_embeddings: usize,
    rope_theta: Option<f32>,
    rms_norm_eps: f32,
}

fn spec_from_config(path: &Path, text: &str) -> Result<ModelSpec> {
    let c: HfConfig = serde_json::from_str(text).map_err(|e| CompileError::BadFormat {
        path: path.to_path_buf(),
        format: "config.json",
        detail: e.to_string(),
    })?;
    let family =
        Family::from_arch(&c.model_type).ok_or_else(|| CompileError::UnknownArchitecture {
            path: path.to_path_buf(),
            arch: c.model_type.clone(),
        })?;
    let head_dim = c
        .head_dim
        .unwrap_or(c.hidden_size / c.num_attention_heads.max(1));
    Ok(ModelSpec {
        family,
        n_layers: c.num_hidden_layers,
        d_model: c.hidden_size,
        d_ff: c.intermediate_size,
        n_heads: c.num_attention_heads,
        n_kv_heads: c.num_key_value_heads.unwrap_or(c.num_attention_heads),
        head_dim,
        vocab: c.vocab_size,
        context: c.max_position_embeddings,
        rope_base: c.rope_theta.unwrap_or(10000.0),
        // Hugging Face checkpoints keep the unpermuted rows: rope rotates halves.
        rope_layout: RopeLayout::Halves,
        rope_dims: head_dim,
        norm_eps: c.rms_norm_eps,
        tied_embeddings: false,
    })
}
