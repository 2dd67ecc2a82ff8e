//! The driver's prefill plans (`plan_prefill`): least estimated time, only the last chunk
//! padded, no chunk past the cache, the same plan for the same prompt.

use poot_runtime::driver::{Part, plan_prefill};

const SIZES: [usize; 4] = [256, 128, 64, 16];

fn chunk(i: usize, tokens: usize) -> Part {
    Part {
        chunk: Some(i),
        tokens,
    }
}

const DECODE: Part = Part {
    chunk: None,
    tokens: 1,
};

#[test]
fn one_padded_chunk_beats_many_small_ones() {
    // 231 tokens: one padded 256-token chunk, not 128 + 64 + 16 + 16 + a padded 16.
    assert_eq!(plan_prefill(&SIZES, 231, 1024), vec![chunk(0, 231)]);
    // 37 tokens (a short chat prompt): one padded 64, not two 16s and a padded 16.
    assert_eq!(plan_prefill(&SIZES, 37, 1024), vec![chunk(2, 37)]);
}

#[test]
fn a_lone_last_token_takes_a_decode_step() {
    assert_eq!(plan_prefill(&SIZES, 129, 1024), vec![chunk(1, 128), DECODE]);
    assert_eq!(plan_prefill(&SIZES, 1, 1024), vec![DECODE]);
}

#[test]
fn long_prompts_take_full_chunks_then_one_padded() {
    let plan = plan_prefill(&SIZES, 600, 1024);
    // The last 88: one padded 128-token chunk, not 64 + 16 + a padded 16.
    assert_eq!(plan, vec![chunk(0, 256), chunk(0, 256), chunk(1, 88)]);
    assert_eq!(plan.iter().map(|p| p.tokens).sum::<usize>(), 600);
}

#[test]
fn no_chunk_reaches_past_the_cache() {
    // 20 tokens with 20 positions left: a 16-token chunk, then decode steps (a padded chunk
    // of 16 would write positions past the cache).
    assert_eq!(
        plan_prefill(&[64, 16], 20, 20),
        vec![chunk(1, 16), DECODE, DECODE, DECODE, DECODE]
    );
    // Every part of every plan stays within the room left at its position.
    for n in 1..=300 {
        for room in [n, n + 3, n + 40, 1024] {
            let mut pos = 0;
            for p in plan_prefill(&SIZES, n, room) {
                let len = p.chunk.map_or(1, |i| SIZES[i]);
                assert!(pos + len <= room, "n {n} room {room}: {p:?} at {pos}");
                assert!(p.tokens <= len && p.tokens > 0);
                pos += p.tokens;
            }
            assert_eq!(pos, n);
        }
    }
}

#[test]
fn only_the_last_chunk_is_padded() {
    for n in 1..=700 {
        let plan = plan_prefill(&SIZES, n, 1024);
        for p in &plan[..plan.len() - 1] {
            assert_eq!(p.tokens, p.chunk.map_or(1, |i| SIZES[i]), "n {n}: {plan:?}");
        }
    }
}

#[test]
fn without_chunks_every_token_is_a_decode_step() {
    assert_eq!(plan_prefill(&[], 3, 10), vec![DECODE; 3]);
}
