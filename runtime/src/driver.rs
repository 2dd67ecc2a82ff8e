//! The driver: greedy generation over any `Executor`, never branching on a backend.
//!
//! Invariants: `Driver::new` loads the weights once and adds every entry it needs once; a
//! prompt runs through prefill-chunk entries (the largest chunk that fits, then one padded and
//! masked chunk, else single decode steps when no chunk fits the cache), then the decode entry
//! replays once per token; only the token ids and the non-finite flag come back; a prompt plus
//! its new tokens must fit the cache. A bundle compiled for several rows runs the sequence in
//! row 0 (the other rows write only their own cache rows).

use crate::error::{Result, RuntimeError};
use crate::executor::{EntryId, Executor};
use crate::text::Text;
use poot_bundle::{OpenedBundle, Sampling, SlotKind, StepKind};
use std::time::Instant;

/// A generation's tokens and timings.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// New tokens, in order.
    pub tokens: Vec<u32>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Seconds spent in prefill (up to the first new token).
    pub prefill_secs: f64,
    /// Seconds spent producing the other new tokens.
    pub decode_secs: f64,
}

/// Generates on one executor.
pub struct Driver<'e> {
    exec: &'e mut dyn Executor,
    /// The bundle's text codec.
    pub text: Text,
    decode: EntryId,
    prefill: Vec<(usize, EntryId)>,
    rows: usize,
    cap: usize,
    pos: usize,
}

impl<'e> Driver<'e> {
    /// Loads `bundle` into `exec` and adds its decode and prefill entries.
    pub fn new(exec: &'e mut dyn Executor, bundle: &OpenedBundle) -> Result<Driver<'e>> {
        exec.load_weights(bundle)?;
        let m = bundle.manifest();
        let text = Text::new(&m.text)?;
        let dec = m
            .entries
            .iter()
            .find(|e| e.key.kind == StepKind::Decode && e.key.sampling == Sampling::Greedy)
            .ok_or_else(|| RuntimeError::Usage("the bundle has no greedy decode entry".into()))?;
        let (rows, cap) = (dec.key.rows, dec.key.cap);
        let decode = exec.add_entry(&dec.key.clone())?;
        let mut prefill = Vec::new();
        for e in &m.entries {
            if let StepKind::Prefill { tokens } = e.key.kind
                && e.key.rows == rows
                && e.key.cap == cap
            {
                prefill.push((tokens as usize, exec.add_entry(&e.key.clone())?));
            }
        }
        prefill.sort_by_key(|p| std::cmp::Reverse(p.0));
        Ok(Driver {
            exec,
            text,
            decode,
            prefill,
            rows: rows as usize,
            cap: cap as usize,
            pos: 0,
        })
    }

    /// The decode entry's key shape: `(rows, cap)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cap)
    }

    /// The executor.
    pub fn executor(&mut self) -> &mut dyn Executor {
        self.exec
    }

    /// Starts a new sequence (zeroes the cache).
    pub fn reset(&mut self) -> Result<()> {
        self.pos = 0;
        self.exec.reset_state()
    }

    fn step(&mut self, entry: EntryId, chunk: usize, tokens: &[u32], prefill: bool) -> Result<u32> {
        let mut tok = vec![0i32; self.rows * chunk];
        for (d, &t) in tok.iter_mut().zip(tokens) {
            *d = t as i32;
        }
        let mut slots = vec![
            (SlotKind::Token, tok),
            (SlotKind::Pos, {
                let mut p = vec![0i32; self.rows];
                p[0] = self.pos as i32;
                p
            }),
        ];
        if prefill {
            let mut li = vec![0i32; self.rows];
            li[0] = tokens.len() as i32 - 1;
            slots.push((SlotKind::LogitIndex, li));
        }
        let out = self.exec.step(entry, &slots)?;
        if out.nonfinite {
            return Err(RuntimeError::Usage(format!(
                "non-finite logits at position {}",
                self.pos
            )));
        }
        self.pos += tokens.len();
        out.tokens
            .first()
            .copied()
            .ok_or_else(|| RuntimeError::Usage("the step read back no token".into()))
    }

    /// Runs `prompt` into the cache; returns the first new token.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<u32> {
        if prompt.is_empty() {
            return Err(RuntimeError::Tokenizer("the prompt is empty".into()));
        }
        let mut rest = prompt;
        let mut next = 0;
        while !rest.is_empty() {
            let room = self.cap - self.pos;
            let full = self
                .prefill
                .iter()
                .find(|(t, _)| *t <= rest.len() && *t <= room)
                .copied();
            let padded = self
                .prefill
                .iter()
                .rev()
                .find(|(t, _)| *t >= rest.len() && *t <= room)
                .copied();
            let (n, entry, chunk, pre) = match (full, padded) {
                (Some((t, e)), _) if t > 1 => (t, e, t, true),
                (_, Some((t, e))) if rest.len() > 1 => (rest.len(), e, t, true),
                _ => (1, self.decode, 1, false),
            };
            next = self.step(entry, chunk, &rest[..n], pre)?;
            rest = &rest[n..];
        }
        Ok(next)
    }

    /// Greedy generation of up to `max_new` tokens after `prompt`, stopping after `stop` (pass
    /// `text.eos()` for chat); `on_token` sees each new token as it is chosen.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        stop: Option<u32>,
        on_token: &mut dyn FnMut(u32),
    ) -> Result<Generation> {
        if prompt.len() + max_new > self.cap {
            return Err(RuntimeError::PromptTooLong {
                prompt: prompt.len(),
                new: max_new,
                cap: self.cap,
            });
        }
        self.reset()?;
        let start = Instant::now();
        let mut tok = self.prefill(prompt)?;
        let prefill_secs = start.elapsed().as_secs_f64();
        let mut tokens = Vec::with_capacity(max_new);
        for i in 0..max_new {
            on_token(tok);
            tokens.push(tok);
            if Some(tok) == stop || i + 1 == max_new {
                break;
            }
            tok = self.step(self.decode, 1, &[tok], false)?;
        }
        let decode_secs = start.elapsed().as_secs_f64() - prefill_secs;
        Ok(Generation {
            tokens,
            prompt_tokens: prompt.len(),
            prefill_secs,
            decode_secs,
        })
    }
}
