//! Text in and out: the tokenizer (through the `tokenizers` crate) and the chat template
//! (through `minijinja`), built from GGUF metadata or from Hugging Face files.
//!
//! Invariants: GGUF byte-level BPE vocabularies are rebuilt with the pre-tokenizer their
//! `tokenizer.ggml.pre` names, as llama.cpp and the original `tokenizer.json` define it
//! (`smollm`: individual digits, then the GPT-2 byte-level regex; `qwen2`: its split regex,
//! then byte-level without a regex); an unknown pre-tokenizer is refused, never guessed.
//! Control and user-defined tokens are added tokens matched before pre-tokenization.

use crate::load::gguf::{Gguf, Meta};
use crate::{CompileError, Result};
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A model's tokenizer, special ids and chat template.
pub struct TextCodec {
    tokenizer: Tokenizer,
    /// Beginning-of-sequence id, if the model has one.
    pub bos: Option<u32>,
    /// End-of-sequence id.
    pub eos: Option<u32>,
    /// Whether prompts start with BOS.
    pub add_bos: bool,
    /// The Jinja chat template, if the model ships one.
    pub template: Option<String>,
}

fn tok_err(e: impl std::fmt::Display) -> CompileError {
    CompileError::Tokenizer(e.to_string())
}

impl TextCodec {
    /// Builds the codec from GGUF metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`).
    pub fn from_gguf(g: &Gguf) -> Result<TextCodec> {
        let model = g.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(CompileError::Metadata {
                path: g.path.clone(),
                key: "tokenizer.ggml.model".into(),
                problem: format!("is `{model}`; only byte-level BPE (`gpt2`) is supported"),
            });
        }
        let tokens = g.strings("tokenizer.ggml.tokens")?;
        let merges = g.strings("tokenizer.ggml.merges")?;
        let types: Vec<u64> = match g.array("tokenizer.ggml.token_type") {
            Ok(a) => a
                .iter()
                .map(|m| {
                    if let Meta::I64(v) = m {
                        *v as u64
                    } else if let Meta::U64(v) = m {
                        *v
                    } else {
                        1
                    }
                })
                .collect(),
            Err(_) => vec![1; tokens.len()],
        };
        let pre = g.str("tokenizer.ggml.pre").unwrap_or("default");
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| tok_err(format!("merge `{m}` is not two tokens")))
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(tok_err)?;
        let mut tk = Tokenizer::new(bpe);
        let byte_level = |regex| ByteLevel::new(false, true, regex);
        let pre_tok: Sequence = match pre {
            "smollm" => Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]),
            "qwen2" => {
                let split = Split::new(
                    SplitPattern::Regex(QWEN2_SPLIT.into()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(tok_err)?;
                tk.with_normalizer(Some(NFC));
                Sequence::new(vec![split.into(), byte_level(false).into()])
            }
            "default" | "gpt-2" | "gpt2" => Sequence::new(vec![byte_level(true).into()]),
            other => {
                return Err(CompileError::Metadata {
                    path: g.path.clone(),
                    key: "tokenizer.ggml.pre".into(),
                    problem: format!("names pre-tokenizer `{other}`, which poot does not know"),
                });
            }
        };
        tk.with_pre_tokenizer(Some(pre_tok));
        tk.with_decoder(Some(ByteLevelDecoder::default()));
        let mut special = Vec::new();
        let mut added = Vec::new();
        for (t, ty) in tokens.iter().zip(&types) {
            match ty {
                3 => special.push(AddedToken::from(t.to_string(), true).normalized(false)),
                4 => added.push(AddedToken::from(t.to_string(), false).normalized(false)),
                _ => {}
            }
        }
        tk.add_special_tokens(&special);
        tk.add_tokens(&added);
        let id = |k: &str| g.uint(k).ok().map(|v| v as u32);
        Ok(TextCodec {
            tokenizer: tk,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: matches!(
                g.meta.get("tokenizer.ggml.add_bos_token"),
                Some(Meta::Bool(true))
            ),
            template: g.str("tokenizer.chat_template").ok().map(str::to_string),
        })
    }

    /// Builds the codec from `tokenizer.json` (and `tokenizer_config.json` if present).
    pub fn from_files(dir: &Path) -> Result<TextCodec> {
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(tok_err)?;
        let cfg: serde_json::Value = std::fs::read_to_string(dir.join("tokenizer_config.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let special = |k: &str| {
            let v = &cfg[k];
            let s = v.as_str().or_else(|| v["content"].as_str())?;
            tokenizer.token_to_id(s)
        };
        Ok(TextCodec {
            bos: special("bos_token"),
            eos: special("eos_token"),
            add_bos: false,
            template: cfg["chat_template"].as_str().map(str::to_string),
            tokenizer,
        })
    }

    /// Token ids of `text` (special tokens written in it are matched), with BOS if the model adds it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text, false).map_err(tok_err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(b)) = (self.add_bos, self.bos) {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids, false).map_err(tok_err)
    }

    /// The tokenizer as Hugging Face `tokenizer.json` text (what a bundle embeds).
    pub fn tokenizer_json(&self) -> Result<String> {
        self.tokenizer.to_string(false).map_err(tok_err)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// Renders the chat template for one user message, ready for the assistant's reply.
    pub fn render_chat(&self, user: &str) -> Result<String> {
        let template = self
            .template
            .as_deref()
            .ok_or_else(|| CompileError::Template("the model has no chat template".into()))?;
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template("chat", template)
            .map_err(|e| CompileError::Template(e.to_string()))?;
        let token = |id: Option<u32>| {
            id.and_then(|i| self.tokenizer.id_to_token(i))
                .unwrap_or_default()
        };
        let ctx = minijinja::context! {
            messages => vec![minijinja::context! { role => "user", content => user }],
            add_generation_prompt => true,
            bos_token => token(self.bos),
            eos_token => token(self.eos),
        };
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(|e| CompileError::Template(e.to_string()))
    }
}
