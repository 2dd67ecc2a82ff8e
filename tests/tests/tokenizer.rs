//! The tokenizers and chat templates built from GGUF metadata against Hugging Face's ids
//! (`fixtures/tokenizer/make_tokens.py`) and rendered prompts (`fixtures/tier3/`).
//!
//! transformers' GGUF converter drops two steps of the models' own `tokenizer.json`: the
//! `smollm` pre-tokenizer's digit split (which llama.cpp applies too) and Qwen2's NFC
//! normalizer. poot follows the models' own tokenizers, so where they differ the fixture's
//! `ids_own` (made by the same script with those steps restored) is the expectation.

use poot_compiler::families::Model;
use poot_compiler::tokenizer::TextCodec;
use poot_tests::{Checkpoint, ids, json};

fn check_tokens(c: Checkpoint) {
    let model = Model::load(&c.path()).unwrap();
    let codec = model.codec.as_ref().expect("GGUF has a tokenizer");
    let fx = json(&format!("tokenizer/{}.json", c.name()));
    assert_eq!(codec.eos, fx["eos_id"].as_u64().map(|x| x as u32));
    assert_eq!(
        codec.vocab_size(),
        fx["vocab_size"].as_u64().unwrap() as usize
    );
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 25);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let own = case.get("ids_own");
        let want = ids(own.unwrap_or(&case["ids"]));
        let got = codec.encode(text).unwrap();
        assert_eq!(got, want, "{}: {text:?}", c.name());
        if own.is_none() {
            assert_eq!(
                codec.decode(&got).unwrap(),
                text,
                "{}: decode of {text:?}",
                c.name()
            );
        }
    }
}

fn check_prompts(c: Checkpoint) {
    let model = Model::load(&c.path()).unwrap();
    let codec = model.codec.as_ref().unwrap();
    let fx = json(&format!("tier3/{}.json", c.name()));
    for case in fx["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let text = if case["chat"].as_bool().unwrap() {
            codec.render_chat(prompt).unwrap()
        } else {
            prompt.to_string()
        };
        assert_eq!(
            text,
            case["rendered"].as_str().unwrap(),
            "{}: rendered {prompt:?}",
            c.name()
        );
        assert_eq!(
            codec.encode(&text).unwrap(),
            ids(&case["prompt_ids"]),
            "{}: {prompt:?}",
            c.name()
        );
    }
}

#[test]
fn smollm2_tokenizer_matches_reference() {
    check_tokens(Checkpoint::SmolLm2);
}

#[test]
fn qwen05_tokenizer_matches_reference() {
    check_tokens(Checkpoint::Qwen05);
}

#[test]
fn smollm2_chat_template_matches_reference() {
    check_prompts(Checkpoint::SmolLm2);
}

#[test]
fn qwen05_chat_template_matches_reference() {
    check_prompts(Checkpoint::Qwen05);
}

/// The codec built from a GGUF, saved as `tokenizer.json` + `tokenizer_config.json` and
/// loaded back through the Hugging Face file path, encodes and renders exactly the same.
fn check_files_path(c: Checkpoint) {
    let model = Model::load(&c.path()).unwrap();
    let codec = model.codec.as_ref().unwrap();
    let dir = std::env::temp_dir().join(format!("poot-tok-{}-{}", c.name(), std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), codec.tokenizer_json().unwrap()).unwrap();
    let name = |id: Option<u32>| codec.decode(&[id.unwrap()]).unwrap();
    let cfg = serde_json::json!({
        "bos_token": name(codec.bos),
        "eos_token": {"content": name(codec.eos)},
        "chat_template": codec.template,
    });
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    let back = TextCodec::from_files(&dir).unwrap();
    assert_eq!((back.bos, back.eos), (codec.bos, codec.eos));
    for case in json(&format!("tokenizer/{}.json", c.name()))["cases"]
        .as_array()
        .unwrap()
    {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            back.encode(text).unwrap(),
            codec.encode(text).unwrap(),
            "{text:?}"
        );
    }
    let q = "Explain what a GPU is in one sentence.";
    assert_eq!(back.render_chat(q).unwrap(), codec.render_chat(q).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn smollm2_tokenizer_json_round_trips() {
    check_files_path(Checkpoint::SmolLm2);
}

#[test]
fn qwen05_tokenizer_json_round_trips() {
    check_files_path(Checkpoint::Qwen05);
}
