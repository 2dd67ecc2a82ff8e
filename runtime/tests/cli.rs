//! The `poot` command line on the reference device: `bench` on a tiny bundle prints decode
//! with and without capture, the cost per dispatch and each prefill chunk; every bad input
//! (a missing, foreign or truncated bundle, a bundle without a tokenizer, an unknown or
//! absent device) exits with status 1 and one `error:` line that says what is wrong, never a
//! panic; a reader of its output that goes away ends it quietly.

use poot_bundle::Target;
use poot_compiler::compile::{CompileOptions, compile};
use poot_compiler::families::Family;
use poot_compiler::plan::Readback;
use poot_compiler::tiny::tiny_model;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A fresh scratch directory for `test` holding `tiny.pbundle`: the tiny llama for the
/// reference target, a cache of 32 positions, a prefill chunk of 8 tokens.
fn scratch_with_bundle(test: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("poot-run-cli-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let model = tiny_model(Family::Llama, 7).expect("tiny model");
    let opts = CompileOptions {
        cap: 32,
        rows: 1,
        prefill_chunks: vec![8],
        targets: vec![Target::Reference],
        readback: Readback::Sampled,
    };
    let (manifest, weights) = compile(&model, &opts, &mut |_, _, _| {}).expect("compile");
    let bundle = dir.join("tiny.pbundle");
    poot_bundle::write_file(&bundle, &manifest, &weights).expect("write the bundle");
    (dir, bundle)
}

fn poot(args: &[&str]) -> (Output, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(args)
        .output()
        .expect("poot starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

/// `args` fail with status 1 and an `error:` line holding one of `says`.
fn refused(args: &[&str], says: &[&str]) {
    let (out, _, err) = poot(args);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    let error = err.lines().any(|l| l.starts_with("error: "));
    assert!(error && !err.contains("panicked"), "{args:?}: {err}");
    assert!(
        says.iter().any(|s| err.contains(s)),
        "{args:?}: none of {says:?} in: {err}"
    );
}

/// `poot bench` prints both modes, the time per dispatch and the prefill chunk, and ends
/// quietly when its reader goes away.
#[test]
fn bench_reports_both_modes_per_dispatch_and_prefill() {
    let (dir, bundle) = scratch_with_bundle("bench");
    let args = [
        "bench",
        path(&bundle),
        "--device",
        "reference",
        "--steps",
        "3",
    ];
    let (out, stdout, err) = poot(&args);
    assert!(out.status.success(), "{err}");
    for want in [
        "device: reference",
        "captured",
        "eager",
        "capture speed-up: ",
        "per dispatch: captured ",
        "eager is bound by the ",
        "prefill 8 tokens x 1 rows: ",
    ] {
        assert!(stdout.contains(want), "`{want}` missing from: {stdout}");
    }
    // A reader that goes away before the first line (`| head -0`): status 0, no panic, no
    // error line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_poot"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("poot starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("poot ends");
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
    let (dir, bundle) = scratch_with_bundle("errors");
    let b = path(&bundle);
    let missing = dir.join("missing.pbundle");
    let noise = dir.join("noise.pbundle");
    std::fs::write(&noise, b"some bytes that are not a bundle").expect("write");
    let half = dir.join("half.pbundle");
    let bytes = std::fs::read(&bundle).expect("read the bundle");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).expect("write");
    let run = |p: &Path, device: &str| {
        ["run", path(p), "--device", device, "--prompt", "hi"].map(String::from)
    };
    let refused_run = |p: &Path, device: &str, says: &[&str]| {
        let args = run(p, device);
        refused(&args.each_ref().map(String::as_str), says);
    };
    refused_run(&missing, "reference", &[path(&missing)]);
    refused_run(&noise, "reference", &["not a poot bundle"]);
    refused_run(&half, "reference", &["truncated"]);
    refused_run(&bundle, "reference", &["the bundle carries no tokenizer"]);
    refused_run(&bundle, "tpu", &["unknown device `tpu`"]);
    // Without the `cuda` feature the build says so; with it, this machine has no driver
    // (CI), or the device cannot run a reference-only bundle.
    refused_run(
        &bundle,
        "cuda",
        &[
            "no CUDA support",
            "libcuda.so was not found",
            "the bundle has no code for this device",
        ],
    );
    // A malformed command line is a usage error (status 2), as clap makes it.
    let (out, _, err) = poot(&["bench", b, "--steps", "x"]);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid value 'x'"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
