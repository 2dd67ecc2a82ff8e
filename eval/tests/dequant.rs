//! Dequantization of every block format equals the `gguf` Python package's reference bit for
//! bit, on fixture blocks covering edge scales (zero, negative zero, subnormal, max finite,
//! negative) and edge quants (`fixtures/dequant/make_dequant.py`).

use poot_eval::dequant::dequantize;
use poot_ir::DType;
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let p = PathBuf::from(root)
        .join("tests/fixtures/dequant")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn check(dtype: DType) {
    let blocks = fixture(&format!("{}.blocks", dtype.name()));
    let want: Vec<u32> = fixture(&format!("{}.f32", dtype.name()))
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let (per, size) = dtype.block();
    assert_eq!(blocks.len() % size, 0);
    assert_eq!(blocks.len() / size * per, want.len());
    let mut got = vec![0f32; want.len()];
    dequantize(dtype, &blocks, &mut got);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_bits(),
            *w,
            "{dtype} element {i} (block {}): got {g:e}, reference {:e}",
            i / per,
            f32::from_bits(*w)
        );
    }
}

#[test]
fn q4_0() {
    check(DType::Q4_0);
}
#[test]
fn q4_1() {
    check(DType::Q4_1);
}
#[test]
fn q5_0() {
    check(DType::Q5_0);
}
#[test]
fn q8_0() {
    check(DType::Q8_0);
}
#[test]
fn q4_k() {
    check(DType::Q4K);
}
#[test]
fn q6_k() {
    check(DType::Q6K);
}

#[test]
fn half_precision_formats() {
    let bytes = [0x00, 0x3c, 0x00, 0x80, 0x01, 0x00, 0xff, 0x7b];
    let mut out = [0f32; 4];
    dequantize(DType::F16, &bytes, &mut out);
    assert_eq!(
        out.map(f32::to_bits),
        [1f32.to_bits(), 0x8000_0000, 0x3380_0000, 65504f32.to_bits()]
    );
    let bytes = [0x80, 0x3f, 0x80, 0xbf];
    let mut out = [0f32; 2];
    dequantize(DType::Bf16, &bytes, &mut out);
    assert_eq!(out, [1.0, -1.0]);
}
