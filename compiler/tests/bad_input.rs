//! Bad input is a typed error whose message says what is wrong, never a panic: truncated and
//! foreign files, unknown versions and architectures, unsupported tensor types, missing and
//! misshapen tensors, prompts longer than the cache. Also: the real loaders read back exactly
//! what the tiny-model writers put in.

mod common;

use common::{assert_bit_identical, inputs, random_step};
use poot_compiler::families::{Family, Model, StepShape, hf_name, roles, trace};
use poot_compiler::oracle::Oracle;
use poot_compiler::tiny::{
    MetaOut, Rng, load_gguf_bytes, random_tensor, tiny_gguf, tiny_meta, tiny_model, tiny_spec,
    tiny_tensors, write_gguf,
};
use poot_compiler::{CompileError, load};
use poot_eval::{EvalOptions, eval};
use poot_ir::DType;
use std::path::Path;

fn load_err(bytes: Vec<u8>) -> String {
    match load_gguf_bytes(Path::new("bad.gguf"), bytes) {
        Ok(_) => panic!("bad GGUF was accepted"),
        Err(e) => e.to_string(),
    }
}

fn meta(arch: &str) -> Vec<(String, MetaOut)> {
    tiny_meta(&tiny_spec(Family::Llama), arch)
}

#[test]
fn tiny_gguf_loads_back_exactly() {
    for family in [Family::Llama, Family::Qwen2] {
        let from_file = load_gguf_bytes(Path::new("tiny.gguf"), tiny_gguf(family, 3)).unwrap();
        let in_memory = tiny_model(family, 3).unwrap();
        assert_eq!(from_file.spec, in_memory.spec);
        let g = trace(&in_memory, StepShape::decode(1, 8)).unwrap();
        let (slots, state) = random_step(&g, in_memory.spec.vocab, 1);
        let a = eval(
            &g,
            &inputs(in_memory.weight_views(), slots.clone(), state.clone()),
            EvalOptions::default(),
        )
        .unwrap();
        let b = eval(
            &g,
            &inputs(from_file.weight_views(), slots, state),
            EvalOptions::default(),
        )
        .unwrap();
        assert_bit_identical(&a, &b, family.name());
    }
}

#[test]
fn truncated_gguf_is_refused_at_every_length() {
    let full = tiny_gguf(Family::Qwen2, 1);
    let header_end = 4096.min(full.len());
    let cuts = (0..header_end).chain((header_end..full.len()).step_by(997));
    for cut in cuts {
        let e = load_err(full[..cut].to_vec());
        assert!(e.contains("bad.gguf: truncated:"), "cut at {cut}: {e}");
    }
    let e = load_err(full[..full.len() - 1].to_vec());
    assert!(e.contains("data of tensor `"), "{e}");
}

#[test]
fn wrong_magic_and_version() {
    let mut b = tiny_gguf(Family::Llama, 1);
    b[..4].copy_from_slice(b"GGML");
    assert_eq!(
        load_err(b.clone()),
        "bad.gguf: not a GGUF file: magic is \"GGML\", expected \"GGUF\""
    );
    b[..4].copy_from_slice(b"GGUF");
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(
        load_err(b),
        "bad.gguf: GGUF version 1 is not supported (2 and 3 are)"
    );
}

#[test]
fn unknown_architecture() {
    let spec = tiny_spec(Family::Llama);
    let e = load_err(write_gguf(&meta("mamba"), &tiny_tensors(&spec, 1)));
    assert_eq!(
        e,
        "bad.gguf: unknown architecture `mamba` (supported: llama, qwen2)"
    );
}

#[test]
fn unsupported_quant_type() {
    let spec = tiny_spec(Family::Llama);
    let tensors = tiny_tensors(&spec, 1);
    let mut b = write_gguf(&meta("llama"), &tensors);
    // Rewrite the first tensor's GGUF type id to Q2_K (10).
    let (name, _, dims, _) = &tensors[0];
    let at = b
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .unwrap()
        + name.len();
    let ty = at + 4 + 8 * dims.len();
    b[ty..ty + 4].copy_from_slice(&10u32.to_le_bytes());
    let e = load_err(b);
    assert_eq!(
        e,
        format!("bad.gguf: tensor `{name}` has unsupported type Q2_K (GGUF type 10)")
    );
}

#[test]
fn missing_tensor() {
    let spec = tiny_spec(Family::Llama);
    let tensors: Vec<_> = tiny_tensors(&spec, 1)
        .into_iter()
        .filter(|t| t.0 != "blk.1.ffn_up.weight")
        .collect();
    assert_eq!(
        load_err(write_gguf(&meta("llama"), &tensors)),
        "bad.gguf: missing tensor `blk.1.ffn_up.weight`"
    );
}

#[test]
fn tensor_with_wrong_shape() {
    let spec = tiny_spec(Family::Llama);
    let mut tensors = tiny_tensors(&spec, 1);
    let t = tensors
        .iter_mut()
        .find(|t| t.0 == "blk.0.attn_k.weight")
        .unwrap();
    t.2 = vec![32, 32];
    t.3 = random_tensor(&mut Rng::new(1), t.1, &t.2, 0.5);
    assert_eq!(
        load_err(write_gguf(&meta("llama"), &tensors)),
        "bad.gguf: tensor `blk.0.attn_k.weight` has shape [32, 32], expected [16, 32]"
    );
}

#[test]
fn missing_metadata_is_named() {
    let spec = tiny_spec(Family::Llama);
    let m: Vec<_> = meta("llama")
        .into_iter()
        .filter(|(k, _)| k != "llama.block_count")
        .collect();
    assert_eq!(
        load_err(write_gguf(&m, &tiny_tensors(&spec, 1))),
        "bad.gguf: metadata `llama.block_count` is missing"
    );
}

#[test]
fn prompt_longer_than_cap() {
    let model = tiny_model(Family::Llama, 1).unwrap();
    let mut oracle = Oracle::new(&model, 8, 4).unwrap();
    let e = oracle.prefill(&[1; 9]).unwrap_err();
    assert!(matches!(
        e,
        CompileError::PromptTooLong {
            prompt: 9,
            new: 0,
            cap: 8
        }
    ));
    assert_eq!(
        e.to_string(),
        "prompt of 9 tokens plus 0 new tokens exceeds the cache capacity of 8 positions"
    );
    let e = oracle.generate(&[1; 5], 4, None, &mut |_| {}).unwrap_err();
    assert_eq!(
        e.to_string(),
        "prompt of 5 tokens plus 4 new tokens exceeds the cache capacity of 8 positions"
    );
    // Exactly full is fine, and the cache is usable afterwards.
    let outs = oracle.generate(&[1; 5], 3, None, &mut |_| {}).unwrap();
    assert_eq!(outs.len(), 3);
}

#[test]
fn unknown_token_id_is_an_error() {
    let model = tiny_model(Family::Qwen2, 1).unwrap();
    let mut oracle = Oracle::new(&model, 16, 4).unwrap();
    let e = oracle.prefill(&[3, 64]).unwrap_err().to_string();
    assert!(e.contains("gather id 64 at 1 is outside 0..64"), "{e}");
}

#[test]
fn padded_prefill_chunks_match_single_steps() {
    // A prompt shorter than the chunk is padded and masked: the greedy tokens and the cache
    // contents of the prompt's positions equal those of feeding it one token at a time.
    let model = tiny_model(Family::Qwen2, 5).unwrap();
    let prompt = [5, 9, 17, 33, 2, 61, 40];
    let mut chunked = Oracle::new(&model, 32, 4).unwrap();
    let mut single = Oracle::new(&model, 32, 1).unwrap();
    let a = chunked.generate(&prompt, 6, None, &mut |_| {}).unwrap();
    let b = single.generate(&prompt, 6, None, &mut |_| {}).unwrap();
    let ta: Vec<u32> = a.iter().map(|s| s.token).collect();
    let tb: Vec<u32> = b.iter().map(|s| s.token).collect();
    assert_eq!(ta, tb);
    for (x, y) in a.iter().zip(&b) {
        let worst = x
            .logits
            .iter()
            .zip(&y.logits)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "chunked vs single logits differ by {worst}");
    }
}

fn write_safetensors(dir: &Path, tensors: &[(String, DType, Vec<usize>, Vec<u8>)]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, dims, bytes) in tensors {
        let dt = match dtype {
            DType::F32 => "F32",
            DType::F16 => "F16",
            _ => "BF16",
        };
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dt, "shape": dims, "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let h = serde_json::to_vec(&header).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(dir.join("model.safetensors"), out).unwrap();
}

#[test]
fn safetensors_with_config_loads() {
    let dir = std::env::temp_dir().join(format!("poot-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = tiny_spec(Family::Qwen2);
    let mut rng = Rng::new(9);
    let tensors: Vec<_> = roles(&spec)
        .into_iter()
        .map(|(r, dims)| {
            let dtype = [DType::F32, DType::F16, DType::Bf16][rng.below(3)];
            let dtype = if dims.len() == 1 { DType::F32 } else { dtype };
            (
                hf_name(r),
                dtype,
                dims.clone(),
                random_tensor(&mut rng, dtype, &dims, 0.5),
            )
        })
        .collect();
    write_safetensors(&dir, &tensors);
    let err = Model::load(&dir).err().unwrap().to_string();
    assert!(err.contains("config.json: No such file"), "{err}");
    let config = serde_json::json!({
        "model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 256,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
        "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-5
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let model = Model::load(&dir).unwrap();
    assert_eq!(model.spec.rope_layout, poot_ir::RopeLayout::Halves);
    assert!(!model.spec.tied_embeddings);
    let reference = Model::bind(
        dir.clone(),
        model.spec.clone(),
        load::WeightStore::from_tensors(tensors.clone()),
        hf_name,
        None,
    )
    .unwrap();
    let g = trace(&model, StepShape::prefill(1, 4, 8)).unwrap();
    let (slots, state) = random_step(&g, 64, 4);
    let a = eval(
        &g,
        &inputs(model.weight_views(), slots.clone(), state.clone()),
        EvalOptions::default(),
    )
    .unwrap();
    let b = eval(
        &g,
        &inputs(reference.weight_views(), slots, state),
        EvalOptions::default(),
    )
    .unwrap();
    assert_bit_identical(&a, &b, "safetensors");
    // A truncated safetensors file names what it could not read.
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let e = load::safetensors::from_bytes(
        Path::new("cut.safetensors"),
        bytes[..bytes.len() / 2].to_vec(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.starts_with("cut.safetensors: truncated: data of tensor `"),
        "{e}"
    );
    let e = load::safetensors::from_bytes(
        Path::new("x.safetensors"),
        b"\x05\0\0\0\0\0\0\0{oops".to_vec(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.starts_with("x.safetensors: not a safetensors file: header is not JSON"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
