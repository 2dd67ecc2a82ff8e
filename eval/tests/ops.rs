//! Documented op semantics the devices will be held to: ties, NaN, masking, bounds.

use poot_eval::{EvalError, EvalOptions, Inputs, Tensor, eval};
use poot_ir::{Builder, CmpOp, DType, Scalar, SlotKind, Type};
use std::collections::HashMap;

fn one_output(
    b: Builder,
    slots: Vec<(SlotKind, Tensor)>,
    state: Vec<(&str, Tensor)>,
) -> Result<Tensor, EvalError> {
    let g = b.finish();
    let inputs = Inputs {
        weights: HashMap::new(),
        state: state.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        slots: slots.into_iter().collect(),
    };
    let e = eval(&g, &inputs, EvalOptions::default())?;
    Ok(e.primary()
        .cloned()
        .unwrap_or_else(|| e.state.into_values().next().unwrap()))
}

#[test]
fn argmax_takes_the_first_of_ties_and_skips_nan() {
    let mut b = Builder::new("t");
    let x = b.state("x", Type::new(DType::F32, [3, 4])).unwrap();
    let a = b.argmax(x, 1).unwrap();
    b.output("a", a);
    let data = vec![
        1.0,
        3.0,
        3.0,
        0.0,
        f32::NAN,
        2.0,
        5.0,
        5.0,
        f32::NAN,
        f32::NAN,
        f32::NAN,
        f32::NAN,
    ];
    let t = one_output(b, vec![], vec![("x", Tensor::f32([3, 4], data).unwrap())]).unwrap();
    assert_eq!(t.as_i32().unwrap(), &[1, 2, 0]);
}

#[test]
fn masked_softmax_gives_exact_zeros() {
    let mut b = Builder::new("t");
    let pos = b.slot(SlotKind::Pos, Type::new(DType::I32, [1])).unwrap();
    let s = b.state("s", Type::new(DType::F32, [1, 4])).unwrap();
    let keys = b.iota([1, 4], 1).unwrap();
    let p = b.reshape(pos, [1, 1]).unwrap();
    let mask = b.compare(CmpOp::Le, keys, p).unwrap();
    let ninf = b.f32(f32::NEG_INFINITY).unwrap();
    let m = b.select(mask, s, ninf).unwrap();
    let y = b.softmax(m, 1).unwrap();
    b.output("y", y);
    let t = one_output(
        b,
        vec![(SlotKind::Pos, Tensor::i32([1], vec![1]).unwrap())],
        vec![(
            "s",
            Tensor::f32([1, 4], vec![0.0, 0.0, 9.0, f32::NAN]).unwrap(),
        )],
    )
    .unwrap();
    assert_eq!(t.as_f32().unwrap(), &[0.5, 0.5, 0.0, 0.0]);
}

#[test]
fn dynamic_update_slice_writes_per_row_and_refuses_overflow() {
    let build = || {
        let mut b = Builder::new("t");
        let pos = b.slot(SlotKind::Pos, Type::new(DType::I32, [2])).unwrap();
        let c = b.state("c", Type::new(DType::F32, [2, 4, 1])).unwrap();
        let u = b.constant(Scalar::F32(7.0), [2, 2, 1]).unwrap();
        let w = b.dynamic_update_slice(c, u, pos, 1).unwrap();
        b.update_state("c", w);
        b
    };
    let zeros = || Tensor::zeros(Type::new(DType::F32, [2, 4, 1]));
    let ok = one_output(
        build(),
        vec![(SlotKind::Pos, Tensor::i32([2], vec![0, 2]).unwrap())],
        vec![("c", zeros())],
    );
    assert_eq!(
        ok.unwrap().as_f32().unwrap(),
        &[7.0, 7.0, 0.0, 0.0, 0.0, 0.0, 7.0, 7.0]
    );
    let err = one_output(
        build(),
        vec![(SlotKind::Pos, Tensor::i32([2], vec![0, 3]).unwrap())],
        vec![("c", zeros())],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("row 1 writes 2 elements along axis 1 at 3, past its size 4"),
        "{err}"
    );
    assert!(
        err.contains("dynamic_update_slice"),
        "the error names the node: {err}"
    );
}

#[test]
fn scatter_update_replaces_rows_and_refuses_bad_index() {
    let build = || {
        let mut b = Builder::new("t");
        let idx = b
            .slot(SlotKind::WriteMap, Type::new(DType::I32, [1]))
            .unwrap();
        let c = b.state("c", Type::new(DType::F32, [3, 2])).unwrap();
        let u = b.constant(Scalar::F32(1.0), [1, 2]).unwrap();
        let w = b.scatter_update(c, u, idx).unwrap();
        b.update_state("c", w);
        b
    };
    let zeros = || Tensor::zeros(Type::new(DType::F32, [3, 2]));
    let ok = one_output(
        build(),
        vec![(SlotKind::WriteMap, Tensor::i32([1], vec![2]).unwrap())],
        vec![("c", zeros())],
    );
    assert_eq!(
        ok.unwrap().as_f32().unwrap(),
        &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    );
    let err = one_output(
        build(),
        vec![(SlotKind::WriteMap, Tensor::i32([1], vec![3]).unwrap())],
        vec![("c", zeros())],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("scatter index 3 at 0 is outside 0..3"),
        "{err}"
    );
}

#[test]
fn missing_and_mismatched_inputs_are_named() {
    let mut b = Builder::new("t");
    let pos = b.slot(SlotKind::Pos, Type::new(DType::I32, [2])).unwrap();
    b.output("p", pos);
    let g = b.finish();
    let err = eval(&g, &Inputs::default(), EvalOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("slot pos is missing"), "{err}");
    let inputs = Inputs {
        slots: [(SlotKind::Pos, Tensor::i32([3], vec![0; 3]).unwrap())].into(),
        ..Inputs::default()
    };
    let err = eval(&g, &inputs, EvalOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pos is i32[3], the graph declares i32[2]"),
        "{err}"
    );
}

#[test]
fn keep_env_returns_every_intermediate() {
    let mut b = Builder::new("t");
    let x = b.constant(Scalar::F32(2.0), [2]).unwrap();
    let y = b.mul(x, x).unwrap();
    let z = b.add(y, x).unwrap();
    b.output("z", z);
    let g = b.finish();
    let e = eval(&g, &Inputs::default(), EvalOptions { keep_env: true }).unwrap();
    let env = e.env.as_ref().unwrap();
    assert_eq!(env[y].as_ref().unwrap().as_f32().unwrap(), &[4.0, 4.0]);
    assert_eq!(e.primary().unwrap().as_f32().unwrap(), &[6.0, 6.0]);
}
