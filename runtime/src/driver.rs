//! The driver: greedy generation over any `Executor`, never branching on a backend.
//!
//! Invariants: `Driver::new` loads the weights once and adds every entry it needs once; a
//! prompt runs through prefill-chunk entries and decode steps as `plan_prefill` orders them
//! (the plan of least estimated time; only the last chunk is padded and masked, and no chunk
//! reaches past the cache), then the decode entry replays once per token; only the token ids and the non-finite flag come back; a prompt plus
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
        let room = self.cap - self.pos;
        if prompt.len() > room {
            return Err(RuntimeError::PromptTooLong {
                prompt: self.pos + prompt.len(),
                new: 0,
                cap: self.cap,
            });
        }
        let sizes: Vec<usize> = self.prefill.iter().map(|p| p.0).collect();
        let mut rest = prompt;
        let mut next = 0;
        for part in plan_prefill(&sizes, prompt.len(), room) {
            let (entry, chunk, pre) = match part.chunk {
                Some(i) => (self.prefill[i].1, self.prefill[i].0, true),
                None => (self.decode, 1, false),
            };
            next = self.step(entry, chunk, &rest[..part.tokens], pre)?;
            rest = &rest[part.tokens..];
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

/// One launch of a prompt's prefill: prefill chunk `chunk` (an index into the sizes given to
/// `plan_prefill`) or, with `None`, a decode step, taking the next `tokens` prompt tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The chunk, or `None` for a decode step.
    pub chunk: Option<usize>,
    /// Prompt tokens it takes (fewer than the chunk's size only in the last part: padded).
    pub tokens: usize,
}

/// Estimated time of a prefill chunk of `t` tokens, `CHUNK_COST + t`, and of a decode step,
/// `DECODE_COST`, in units of one prompt token's share of a chunk. A chunk's time is mostly
/// fixed (every weight is read and every dispatch waits for the one before, whatever its
/// length): on the H100 (`poot bench`, BENCHMARKS.md, twenty-ninth session) SmolLM2's chunks
/// of 16, 64, 128 and 256 tokens took 973, 1687, 2186 and 3529 us, about 10.6 us times
/// 75 + t, and its decode step 337 us (32 such units); Qwen2.5-0.5B's 16- and 64-token chunks
/// 2081 and 2835 us, 15.7 us times 116 + t, its decode step 487 us (31 units).
const CHUNK_COST: usize = 80;
const DECODE_COST: usize = 32;

/// The parts of a prefill of `n` tokens where the cache has `room` positions left (at least
/// `n`) and the bundle has prefill chunks of `sizes` tokens (largest first): the sequence of
/// least estimated time (see `CHUNK_COST`), each chunk within the room left at its position,
/// only the last one padded. Ties go to the earlier size, then to chunks over decode steps,
/// so the plan of a given prompt is always the same.
pub fn plan_prefill(sizes: &[usize], n: usize, room: usize) -> Vec<Part> {
    // `best[r]`: the least cost of the last `r` tokens, and the first part of that plan.
    let mut best: Vec<(usize, Part)> = Vec::with_capacity(n + 1);
    best.push((
        0,
        Part {
            chunk: None,
            tokens: 0,
        },
    ));
    for r in 1..=n {
        let room_r = room - (n - r);
        let decode = Part {
            chunk: None,
            tokens: 1,
        };
        let mut pick = (DECODE_COST + best[r - 1].0, decode);
        for (i, &c) in sizes.iter().enumerate() {
            if c > 1 && c <= room_r {
                let take = c.min(r);
                let cost = CHUNK_COST + c + best[r - take].0;
                if cost <= pick.0 && (pick.1.chunk.is_none() || cost < pick.0) {
                    pick = (
                        cost,
                        Part {
                            chunk: Some(i),
                            tokens: take,
                        },
                    );
                }
            }
        }
        best.push(pick);
    }
    let mut parts = Vec::new();
    let mut r = n;
    while r > 0 {
        let p = best[r].1;
        parts.push(p);
        r -= p.tokens;
    }
    parts
}
