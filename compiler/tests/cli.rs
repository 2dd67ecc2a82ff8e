//! The `poot-compile` command line: a tiny GGUF compiles into a bundle that `inspect` reads
//! (the same inputs giving the same bytes), and every bad input exits with status 1 and one
//! `error:` line that says what is wrong, never a panic; a reader of its output that goes
//! away ends it quietly.

use poot_compiler::families::Family;
use poot_compiler::tiny::tiny_gguf;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A fresh scratch directory for `test`.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn poot_compile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poot-compile"))
        .args(args)
        .output()
        .expect("poot-compile starts")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `args` fail with status 1 and an `error:` line holding every one of `says`.
fn refused(args: &[&str], says: &[&str]) {
    let out = poot_compile(args);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && !err.contains("panicked"),
        "{args:?}: {err}"
    );
    for s in says {
        assert!(err.contains(s), "{args:?}: `{s}` missing from: {err}");
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

#[test]
fn default_prefill_chunks_are_those_within_the_cache() {
    let dir = scratch("chunks");
    let gguf = dir.join("tiny.gguf");
    std::fs::write(&gguf, tiny_gguf(Family::Qwen2, 3)).expect("write the tiny GGUF");
    let b = dir.join("m.pbundle");
    let args = [
        path(&gguf),
        "--target",
        "reference",
        "--cap",
        "100",
        "-o",
        path(&b),
    ];
    let out = poot_compile(&args);
    assert!(out.status.success(), "{}", text(&out).1);
    let out = poot_compile(&["inspect", path(&b)]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{err}");
    let chunks: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split("prefill tokens=").nth(1))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(chunks, ["64", "16"], "{stdout}");
}

#[test]
fn a_tiny_model_compiles_the_same_twice_and_inspects() {
    let dir = scratch("compile");
    let gguf = dir.join("tiny.gguf");
    std::fs::write(&gguf, tiny_gguf(Family::Llama, 5)).expect("write the tiny GGUF");
    let bundles = ["a.pbundle", "b.pbundle"].map(|b| dir.join(b));
    for b in &bundles {
        let args = [path(&gguf), "--target", "reference,spirv", "--cap", "32"];
        let out = poot_compile(&[&args[..], &["--prefill-chunks", "8", "-o", path(b)]].concat());
        let (_, err) = text(&out);
        // The summary goes to stderr, beside the progress bar.
        assert!(out.status.success() && err.contains("2 entries"), "{err}");
    }
    let [a, b] = [&bundles[0], &bundles[1]].map(|b| std::fs::read(b).expect("read the bundle"));
    assert!(a == b, "two compiles of the same inputs differ");
    let out = poot_compile(&["inspect", path(&bundles[0]), "--dispatches"]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{err}");
    for want in ["reference", "spirv", "decode", "prefill"] {
        assert!(stdout.contains(want), "`{want}` missing from: {stdout}");
    }
    // A reader that goes away before the first line (`| head -0`): status 0, no panic.
    let mut child = Command::new(env!("CARGO_BIN_EXE_poot-compile"))
        .args(["inspect", path(&bundles[0]), "--dispatches"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("poot-compile starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("poot-compile ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("panicked") && !err.contains("error:"),
        "{:?}: {err}",
        out.status
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_inputs_say_what_is_wrong() {
    let dir = scratch("errors");
    let full = tiny_gguf(Family::Qwen2, 1);
    let truncated = dir.join("truncated.gguf");
    std::fs::write(&truncated, &full[..full.len() / 2]).expect("write");
    let good = dir.join("good.gguf");
    std::fs::write(&good, &full).expect("write");
    let not_a_bundle = dir.join("noise.pbundle");
    std::fs::write(&not_a_bundle, b"not a bundle at all, just some bytes").expect("write");
    let out = path(&dir.join("out.pbundle")).to_string();
    let missing = dir.join("missing.gguf");
    refused(&[path(&missing), "-o", &out], &[path(&missing)]);
    refused(
        &[path(&truncated), "-o", &out],
        &["truncated", "the file has"],
    );
    refused(
        &[path(&good), "--target", "ptx-sm9x", "-o", &out],
        &["unknown target `ptx-sm9x`"],
    );
    refused(
        &[path(&good), "--prefill-chunks", "8,x", "-o", &out],
        &["--prefill-chunks `x`"],
    );
    refused(&[path(&good)], &["-o"]);
    refused(&["inspect", path(&not_a_bundle)], &["not a poot bundle"]);
    std::fs::remove_dir_all(&dir).ok();
}
