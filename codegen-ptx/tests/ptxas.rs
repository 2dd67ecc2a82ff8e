//! Assembles every PTX golden in `snapshots/ptx/` with NVIDIA's `ptxas` for the golden's
//! own target (`-sm80` / `-sm90` in the file name), so a golden that the driver would reject
//! cannot be blessed.
//!
//! `ptxas` is found through `POOT_PTXAS`, then `PATH`, then the `nvidia-cuda-nvcc-cu12` pip
//! package (`pip install nvidia-cuda-nvcc-cu12==12.9.86`). Without it the test prints
//! `SKIP ptxas not found` and passes, unless `POOT_REQUIRE_PTXAS=1`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn works(ptxas: &Path) -> bool {
    Command::new(ptxas)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("POOT_PTXAS") {
        let p = PathBuf::from(p);
        assert!(works(&p), "POOT_PTXAS={} does not run", p.display());
        return Some(p);
    }
    let on_path = PathBuf::from("ptxas");
    if works(&on_path) {
        return Some(on_path);
    }
    // `nvidia.cuda_nvcc` is a namespace package: it has `__path__` but no `__file__`.
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])",
        ])
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let p = Path::new(dir.trim()).join("bin").join("ptxas");
    works(&p).then_some(p)
}

/// The PTX text of an insta snapshot: everything after the second `---` line.
fn snapshot_body(text: &str) -> &str {
    let mut rest = text;
    for _ in 0..2 {
        match rest.find("---\n") {
            Some(i) => rest = &rest[i + 4..],
            None => return "",
        }
    }
    rest
}

#[test]
fn goldens_assemble() {
    let Some(ptxas) = find_ptxas() else {
        assert!(
            std::env::var("POOT_REQUIRE_PTXAS").as_deref() != Ok("1"),
            "POOT_REQUIRE_PTXAS=1 but ptxas was not found (set POOT_PTXAS or pip install nvidia-cuda-nvcc-cu12)"
        );
        println!("SKIP ptxas not found");
        return;
    };
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&root).join("../snapshots/ptx");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no goldens in {}", dir.display());
    let tmp = std::env::temp_dir().join(format!("poot-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut failures = Vec::new();
    for f in &files {
        let stem = f.file_stem().unwrap().to_string_lossy().to_string();
        let arch = match stem.rsplit_once('-') {
            Some((_, "sm80")) => "sm_80",
            Some((_, "sm90")) => "sm_90",
            _ => panic!("{stem}: golden name does not end in -sm80 or -sm90"),
        };
        let text = std::fs::read_to_string(f).unwrap();
        let ptx = tmp.join(format!("{stem}.ptx"));
        std::fs::write(&ptx, snapshot_body(&text)).unwrap();
        let out = Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg(&ptx)
            .args(["-o", "/dev/null"])
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", ptxas.display()));
        if out.status.success() {
            println!("ok {stem} ({arch})");
        } else {
            failures.push(format!("{stem}: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        failures.is_empty(),
        "ptxas rejected:\n{}",
        failures.join("\n")
    );
}
