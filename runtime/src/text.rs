//! Text in and out at run time: the tokenizer and chat template a bundle carries.
//!
//! Invariant: the tokenizer is exactly the compiler's (it travels as `tokenizer.json`), and the
//! chat template renders with the same Jinja environment the compiler's tests check against
//! Hugging Face (Python string methods through `minijinja-contrib`'s pycompat).

use crate::error::{Result, RuntimeError};
use poot_bundle::TextInfo;
use tokenizers::Tokenizer;

/// A bundle's text codec.
pub struct Text {
    tokenizer: Tokenizer,
    info: TextInfo,
}

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Tokenizer(e.to_string())
}

impl Text {
    /// The codec of a bundle.
    pub fn new(info: &TextInfo) -> Result<Text> {
        if info.tokenizer_json.is_empty() {
            return Err(RuntimeError::Tokenizer(
                "the bundle carries no tokenizer".into(),
            ));
        }
        let tokenizer = Tokenizer::from_bytes(info.tokenizer_json.as_bytes()).map_err(err)?;
        Ok(Text {
            tokenizer,
            info: info.clone(),
        })
    }

    /// End-of-sequence id.
    pub fn eos(&self) -> Option<u32> {
        self.info.eos
    }

    /// Token ids of `text` (special tokens written in it are matched), BOS first if the model adds it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text, false).map_err(err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(b)) = (self.info.add_bos, self.info.bos) {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens dropped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids, true).map_err(err)
    }

    /// The chat template rendered for one user message, ready for the reply.
    pub fn chat(&self, user: &str) -> Result<String> {
        let template = self
            .info
            .chat_template
            .as_deref()
            .ok_or_else(|| err("the model has no chat template"))?;
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
        env.add_template("chat", template).map_err(err)?;
        let token = |id: Option<u32>| {
            id.and_then(|i| self.tokenizer.id_to_token(i))
                .unwrap_or_default()
        };
        let ctx = minijinja::context! {
            messages => vec![minijinja::context! { role => "user", content => user }],
            add_generation_prompt => true,
            bos_token => token(self.info.bos),
            eos_token => token(self.info.eos),
        };
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(err)
    }
}
