//! The text form: round-trips for every op, and errors that name the line or node at fault.

use poot_ir::{IrError, parse, print, verify};

const ALL_OPS: &str = "graph all.ops {
  v0 = slot token : i32[2,3]
  v1 = slot pos : i32[2]
  v2 = slot write_map : i32[6]
  v3 = weight token_embd : q4_k[8,256]
  v4 = weight output : bf16[8,256]
  v5 = state k.0 : f32[2,4,1,256]
  v6 = state pool : f32[5,256]
  v7 = const -0.0 : f32[]
  v8 = const 3 : i32[]
  v9 = const true : bool[2,3]
  v10 = iota axis=1 : i32[2,3]
  v11 = gather v3, v0 : f32[2,3,256]
  v12 = neg v11 : f32[2,3,256]
  v13 = exp v12 : f32[2,3,256]
  v14 = sqrt v13 : f32[2,3,256]
  v15 = rsqrt v14 : f32[2,3,256]
  v16 = recip v15 : f32[2,3,256]
  v17 = silu v16 : f32[2,3,256]
  v18 = add v17, v7 : f32[2,3,256]
  v19 = sub v18, v7 : f32[2,3,256]
  v20 = mul v19, v7 : f32[2,3,256]
  v21 = div v20, v7 : f32[2,3,256]
  v22 = max v21, v7 : f32[2,3,256]
  v23 = min v22, v7 : f32[2,3,256]
  v24 = lt v10, v8 : bool[2,3]
  v25 = eq v24, v9 : bool[2,3]
  v26 = cast v25 : i32[2,3]
  v27 = le v26, v8 : bool[2,3]
  v28 = reduce_sum v23 axis=2 : f32[2,3,1]
  v29 = reduce_max v28 axis=1 : f32[2,1,1]
  v30 = softmax v23 axis=2 : f32[2,3,256]
  v31 = weight attn_norm.0 : f32[256]
  v32 = rms_norm v30, v31 eps=1e-6 : f32[2,3,256]
  v33 = matmul v32, v4 : f32[2,3,8]
  v34 = reshape v32 : f32[2,3,1,256]
  v35 = rope v34, v0 layout=halves base=1000000.0 dims=64 : f32[2,3,1,256]
  v36 = dynamic_update_slice v5, v35, v1 axis=1 : f32[2,4,1,256]
  v37 = attn_scores v35, v36 : f32[2,1,3,4]
  v38 = attn_mix v37, v36 : f32[2,3,1,256]
  v39 = reshape v38 : f32[6,256]
  v40 = reshape v39 : f32[1,1536]
  v41 = reshape v40 : f32[6,256]
  v42 = reshape v41 : f32[6,256]
  v43 = scatter_update v6, v42, v2 : f32[5,256]
  v44 = argmax v33 axis=2 : i32[2,3,1]
  v45 = any_nonfinite v33 : bool[]
  v46 = select v27, v26, v10 : i32[2,3]
  v47 = reduce_max v29 axis=0 : f32[1,1,1]
  output logits = v33
  output token = v44
  output bad = v45
  output z = v46
  output w = v47
  state k.0 = v36
  state pool = v43
}
";

#[test]
fn every_op_round_trips() {
    let g = parse(ALL_OPS).unwrap();
    verify(&g).unwrap();
    assert_eq!(print(&g), ALL_OPS);
}

fn parse_err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn parse_errors_name_the_line() {
    let e = parse_err("graph g {\n  v0 = slot token : i32[1]\n  v1 = frobnicate v0 : i32[1]\n}\n");
    assert_eq!(
        e,
        "line 3: unknown op `frobnicate`\n  v1 = frobnicate v0 : i32[1]"
    );
    let e = parse_err("graph g {\n  v0 = slot token : i32[1]\n  v1 = neg v9 : f32[1]\n}\n");
    assert!(e.starts_with("line 3: unknown value `v9`"), "{e}");
    let e = parse_err("graph g {\n  v0 = slot token : x32[1]\n}\n");
    assert!(e.starts_with("line 2: bad type"), "{e}");
    let e = parse_err("graph g {\n  v0 = slot token : i32[1]\n");
    assert!(e.contains("missing closing brace"), "{e}");
    let e = parse_err("");
    assert!(e.contains("empty text"), "{e}");
    let e = parse_err("graph g {\n  v0 = weight attn_q.x : f32[1,1]\n}\n");
    assert!(e.contains("bad weight role"), "{e}");
}

#[test]
fn verify_errors_name_and_print_the_node() {
    let e = parse_err("graph g {\n  v0 = slot token : i32[2]\n  v1 = neg v0 : i32[2]\n}\n");
    assert_eq!(
        e,
        "graph `g`: v1: operand 0 must be f32, is i32[2]\n  at: v1 = neg v0 : i32[2]"
    );
    let e =
        parse_err("graph g {\n  v0 = state s : f32[2,3]\n  v1 = softmax v0 axis=1 : f32[3,2]\n}\n");
    assert!(e.contains("v1: result type should be f32[2,3]"), "{e}");
    let e = parse_err("graph g {\n  v0 = state s : f32[2]\n  v1 = state s : f32[2]\n}\n");
    assert!(e.contains("v1: input declared twice"), "{e}");
    let e = parse_err(
        "graph g {\n  v0 = state s : f32[2]\n  v1 = exp v0 : f32[2]\n  state t = v1\n}\n",
    );
    assert!(e.contains("update of unknown state `t`"), "{e}");
    let e = parse_err(
        "graph g {\n  v0 = state s : f32[2]\n  v1 = exp v0 : f32[2]\n  output a = v1\n  output a = v0\n}\n",
    );
    assert!(e.contains("output `a` is defined twice"), "{e}");
}

#[test]
fn builder_refuses_ill_typed_nodes() {
    let mut b = poot_ir::Builder::new("g");
    let x = b
        .state("x", poot_ir::Type::new(poot_ir::DType::F32, [2, 3]))
        .unwrap();
    let w = b
        .state("w", poot_ir::Type::new(poot_ir::DType::F32, [4, 5]))
        .unwrap();
    let e = b.matmul(x, w).unwrap_err();
    assert!(matches!(e, IrError::Build { op: "matmul", .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "cannot build matmul: cannot multiply f32[2,3] by f32[4,5]^T"
    );
}
