//! Tracing a decoder-only transformer (llama, qwen2) into one step-shape graph.
//!
//! Invariants: the graph's shape depends only on the spec and the `StepShape`, never on a
//! position: tokens and positions are slots, K/V are `State` buffers `[rows, cap, kv_heads,
//! head_dim]` written with `dynamic_update_slice` at `slot pos`, and attention sweeps all
//! `cap` positions under a mask computed in the graph from `slot pos` against an `iota`.
//! The trace is deliberately literal (per-layer mask and scale, constants as ops); the passes
//! clean it up, and the snapshots show each of their effects.

use super::{Model, ModelSpec};
use crate::Result;
use poot_ir::{
    Builder, CmpOp, DType, Graph, RoleKind, Scalar, SlotKind, Type, UnaryOp, Value, WeightRole,
};

/// One step shape: `rows` sequences of `tokens` tokens each, over a cache of `cap` positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepShape {
    /// Sequences per step.
    pub rows: usize,
    /// Tokens per sequence per step (1 for decode, the chunk length for prefill).
    pub tokens: usize,
    /// KV cache capacity in positions.
    pub cap: usize,
    /// Append the greedy sampling suffix (`token`, `nonfinite` outputs) after the logits.
    pub greedy: bool,
}

impl StepShape {
    /// A decode step for `rows` sequences.
    pub fn decode(rows: usize, cap: usize) -> StepShape {
        StepShape {
            rows,
            tokens: 1,
            cap,
            greedy: true,
        }
    }
    /// A prefill chunk of `tokens` tokens for `rows` sequences.
    pub fn prefill(rows: usize, tokens: usize, cap: usize) -> StepShape {
        StepShape {
            rows,
            tokens,
            cap,
            greedy: true,
        }
    }
    /// The step's graph name, `llama.decode.r1.c256` or `llama.prefill16.r1.c256`.
    pub fn name(&self, family: &str) -> String {
        let kind = if self.tokens == 1 {
            "decode".to_string()
        } else {
            format!("prefill{}", self.tokens)
        };
        format!("{family}.{kind}.r{}.c{}", self.rows, self.cap)
    }
}

/// The names of layer `l`'s K and V cache states.
pub fn cache_names(l: usize) -> (String, String) {
    (format!("k.{l}"), format!("v.{l}"))
}

/// Traces one step of `model`.
pub fn trace(model: &Model, step: StepShape) -> Result<Graph> {
    let ty = |r: WeightRole| {
        model
            .weight_type(r)
            .ok_or_else(|| crate::CompileError::MissingTensor {
                path: model.path.clone(),
                tensor: poot_ir::role_text(r),
            })
    };
    trace_spec(&model.spec, &ty, step)
}

/// Traces one step of a spec whose weight types `ty` gives.
pub fn trace_spec(
    spec: &ModelSpec,
    ty: &dyn Fn(WeightRole) -> Result<Type>,
    step: StepShape,
) -> Result<Graph> {
    let StepShape {
        rows: r,
        tokens: t,
        cap: c,
        ..
    } = step;
    let (h, g, hd, d) = (spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_model);
    let mut b = Builder::new(step.name(spec.family.name()));
    let w = |b: &mut Builder, kind, layer: Option<usize>| -> Result<Value> {
        let role = WeightRole {
            kind,
            layer: layer.map(|l| l as u32),
        };
        Ok(b.weight(role, ty(role)?)?)
    };
    let tokens = b.slot(SlotKind::Token, Type::new(DType::I32, [r, t]))?;
    let pos = b.slot(SlotKind::Pos, Type::new(DType::I32, [r]))?;
    let logit_index = if t > 1 {
        Some(b.slot(SlotKind::LogitIndex, Type::new(DType::I32, [r]))?)
    } else {
        None
    };
    let embd = w(&mut b, RoleKind::TokenEmbd, None)?;
    let mut x = b.gather(embd, tokens)?;
    for l in 0..spec.n_layers {
        let (kn, vn) = cache_names(l);
        let kc = b.state(kn.clone(), Type::new(DType::F32, [r, c, g, hd]))?;
        let vc = b.state(vn.clone(), Type::new(DType::F32, [r, c, g, hd]))?;
        // Positions of this step's tokens, and the causal mask over the cache.
        let p = b.reshape(pos, [r, 1])?;
        let steps = b.iota([r, t], 1)?;
        let positions = b.add(p, steps)?;
        let key_pos = b.iota([1, 1, 1, c], 3)?;
        let query_pos = b.reshape(positions, [r, 1, t, 1])?;
        let mask = b.compare(CmpOp::Le, key_pos, query_pos)?;

        let norm = w(&mut b, RoleKind::AttnNorm, Some(l))?;
        let hn = b.rms_norm(x, norm, spec.norm_eps)?;
        let proj = |b: &mut Builder, kind, bias, heads| -> Result<Value> {
            let wt = w(b, kind, Some(l))?;
            let mut y = b.matmul(hn, wt)?;
            if spec.family.qkv_bias() {
                let bv = w(b, bias, Some(l))?;
                y = b.add(y, bv)?;
            }
            Ok(b.reshape(y, [r, t, heads, hd])?)
        };
        let q = proj(&mut b, RoleKind::AttnQ, RoleKind::AttnQBias, h)?;
        let k = proj(&mut b, RoleKind::AttnK, RoleKind::AttnKBias, g)?;
        let v = proj(&mut b, RoleKind::AttnV, RoleKind::AttnVBias, g)?;
        let q = b.rope(
            q,
            positions,
            spec.rope_layout,
            spec.rope_base,
            spec.rope_dims,
        )?;
        let k = b.rope(
            k,
            positions,
            spec.rope_layout,
            spec.rope_base,
            spec.rope_dims,
        )?;
        let kc = b.dynamic_update_slice(kc, k, pos, 1)?;
        let vc = b.dynamic_update_slice(vc, v, pos, 1)?;
        b.update_state(kn, kc);
        b.update_state(vn, vc);

        let hd_f = b.f32(hd as f32)?;
        let scale = b.unary(UnaryOp::Rsqrt, hd_f)?;
        let s = b.attn_scores(q, kc)?;
        let s = b.mul(s, scale)?;
        let neg_inf = b.f32(f32::NEG_INFINITY)?;
        let s = b.select(mask, s, neg_inf)?;
        let p = b.softmax(s, 3)?;
        let o = b.attn_mix(p, vc)?;
        let o = b.reshape(o, [r, t, h * hd])?;
        let wo = w(&mut b, RoleKind::AttnOutput, Some(l))?;
        let o = b.matmul(o, wo)?;
        x = b.add(x, o)?;

        let norm = w(&mut b, RoleKind::FfnNorm, Some(l))?;
        let hn = b.rms_norm(x, norm, spec.norm_eps)?;
        let wg = w(&mut b, RoleKind::FfnGate, Some(l))?;
        let gate = b.matmul(hn, wg)?;
        let wu = w(&mut b, RoleKind::FfnUp, Some(l))?;
        let up = b.matmul(hn, wu)?;
        let act = b.unary(UnaryOp::Silu, gate)?;
        let act = b.mul(act, up)?;
        let wd = w(&mut b, RoleKind::FfnDown, Some(l))?;
        let down = b.matmul(act, wd)?;
        x = b.add(x, down)?;
    }
    let norm = w(&mut b, RoleKind::OutputNorm, None)?;
    let x = b.rms_norm(x, norm, spec.norm_eps)?;
    // One row of hidden state per sequence: the token whose logits the step reads.
    let last = match logit_index {
        None => b.reshape(x, [r, d])?,
        Some(li) => {
            let flat = b.reshape(x, [r * t, d])?;
            let row = b.iota([r], 0)?;
            let chunk = b.constant(Scalar::I32(t as i32), [])?;
            let base = b.mul(row, chunk)?;
            let idx = b.add(base, li)?;
            b.gather(flat, idx)?
        }
    };
    let head = if spec.tied_embeddings {
        embd
    } else {
        w(&mut b, RoleKind::Output, None)?
    };
    let logits = b.matmul(last, head)?;
    b.output("logits", logits);
    if step.greedy {
        let token = b.argmax(logits, 1)?;
        let bad = b.any_nonfinite(logits)?;
        b.output("token", token);
        b.output("nonfinite", bad);
    }
    Ok(b.finish())
}
