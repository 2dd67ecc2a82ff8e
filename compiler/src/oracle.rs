//! The CPU oracle: greedy generation over `poot_eval`, run exactly as a device runs it.
//!
//! Invariants: a prompt goes through prefill-chunk steps (full chunks, then one padded and
//! masked chunk when it fits the cache, else single decode steps), then one decode step per
//! new token, all through the same K/V state; the next token is the graph's own greedy
//! suffix (`token` output), and a step whose `nonfinite` flag is set is an error. A prompt
//! plus its new tokens must fit `cap`; nothing here depends on the position except slots.

use crate::families::{Model, StepShape, trace};
use crate::passes::{PassOptions, optimize};
use crate::{CompileError, Result};
use poot_eval::{EvalOptions, Inputs, Tensor, eval};
use poot_ir::{Graph, SlotKind};
use std::collections::HashMap;

/// One step's result for the row.
#[derive(Clone, Debug)]
pub struct StepOut {
    /// The greedy token.
    pub token: u32,
    /// The full logits of the token the step read.
    pub logits: Vec<f32>,
}

/// A single-sequence generator over the CPU reference.
pub struct Oracle<'m> {
    inputs: Inputs<'m>,
    decode: Graph,
    prefill: Option<Graph>,
    chunk: usize,
    cap: usize,
    pos: usize,
}

impl<'m> Oracle<'m> {
    /// Traces and optimizes the decode step and a prefill chunk of `chunk` tokens.
    pub fn new(model: &'m Model, cap: usize, chunk: usize) -> Result<Oracle<'m>> {
        let mut decode = trace(model, StepShape::decode(1, cap))?;
        optimize(&mut decode, PassOptions::default())?;
        let prefill = if chunk > 1 {
            let mut g = trace(model, StepShape::prefill(1, chunk, cap))?;
            optimize(&mut g, PassOptions::default())?;
            Some(g)
        } else {
            None
        };
        let mut o = Oracle {
            inputs: Inputs {
                weights: model.weight_views(),
                ..Inputs::default()
            },
            decode,
            prefill,
            chunk,
            cap,
            pos: 0,
        };
        o.reset();
        Ok(o)
    }

    /// Clears the cache and starts a new sequence.
    pub fn reset(&mut self) {
        self.inputs.state = self
            .decode
            .states()
            .map(|(v, name)| (name.to_string(), Tensor::zeros(self.decode.ty(v).clone())))
            .collect();
        self.pos = 0;
    }

    /// Positions used so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn run(&mut self, prefill: bool, tokens: Vec<i32>, logit_index: usize) -> Result<StepOut> {
        let n = tokens.len();
        let mut slots = HashMap::new();
        slots.insert(SlotKind::Token, Tensor::i32([1, n], tokens)?);
        slots.insert(SlotKind::Pos, Tensor::i32([1], vec![self.pos as i32])?);
        if prefill {
            slots.insert(
                SlotKind::LogitIndex,
                Tensor::i32([1], vec![logit_index as i32])?,
            );
        }
        self.inputs.slots = slots;
        let g = match (&self.prefill, prefill) {
            (Some(p), true) => p,
            _ => &self.decode,
        };
        let mut out = eval(g, &self.inputs, EvalOptions::default())?;
        self.inputs.state = std::mem::take(&mut out.state);
        let nonfinite = out
            .output("nonfinite")
            .and_then(|t| t.as_bool())
            .is_some_and(|b| b[0]);
        let logits = out
            .output("logits")
            .and_then(|t| t.as_f32())
            .unwrap_or(&[])
            .to_vec();
        if nonfinite {
            return Err(CompileError::Eval(poot_eval::EvalError::Input(format!(
                "non-finite logits at position {}",
                self.pos
            ))));
        }
        let token = out
            .output("token")
            .and_then(|t| t.as_i32())
            .map_or(0, |t| t[0]) as u32;
        Ok(StepOut { token, logits })
    }

    fn check_room(&self, tokens: usize, new: usize) -> Result<()> {
        if self.pos + tokens + new > self.cap {
            return Err(CompileError::PromptTooLong {
                prompt: self.pos + tokens,
                new,
                cap: self.cap,
            });
        }
        Ok(())
    }

    /// Runs `prompt` through the cache; returns the step of its last token.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<StepOut> {
        self.check_room(prompt.len(), 0)?;
        let mut rest = prompt;
        let mut last = None;
        while !rest.is_empty() {
            let take = rest.len().min(self.chunk);
            let fits = self.pos + self.chunk <= self.cap;
            if self.prefill.is_some() && (take == self.chunk || (take > 1 && fits)) {
                let mut toks: Vec<i32> = rest[..take].iter().map(|&t| t as i32).collect();
                toks.resize(self.chunk, 0);
                last = Some(self.run(true, toks, take - 1)?);
                self.pos += take;
                rest = &rest[take..];
            } else {
                last = Some(self.run(false, vec![rest[0] as i32], 0)?);
                self.pos += 1;
                rest = &rest[1..];
            }
        }
        last.ok_or_else(|| CompileError::Tokenizer("the prompt is empty".into()))
    }

    /// Feeds one token at the current position.
    pub fn decode(&mut self, token: u32) -> Result<StepOut> {
        self.check_room(1, 0)?;
        let out = self.run(false, vec![token as i32], 0)?;
        self.pos += 1;
        Ok(out)
    }

    /// Greedy generation of up to `max_new` tokens after `prompt`, stopping after `stop`
    /// if given; `on_token` sees each new token as it is chosen.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_new: usize,
        stop: Option<u32>,
        on_token: &mut dyn FnMut(&StepOut),
    ) -> Result<Vec<StepOut>> {
        self.check_room(prompt.len(), max_new)?;
        let mut outs: Vec<StepOut> = Vec::with_capacity(max_new);
        let mut step = self.prefill(prompt)?;
        for i in 0..max_new {
            on_token(&step);
            let tok = step.token;
            outs.push(step);
            if Some(tok) == stop || i + 1 == max_new {
                break;
            }
            step = self.decode(tok)?;
        }
        Ok(outs)
    }
}
