//! Assembles every PTX golden in `snapshots/ptx/` with NVIDIA's `ptxas` for the golden's
//! own target (`-sm80` / `-sm90` in the file name), so a golden that the driver would reject
//! cannot be blessed; and disassembles the sm_90 ones (`cuobjdump -sass`) to check that no
//! global memory instruction precedes the grid wait (`ACQBULK`). ptxas moves `ld.global.nc`
//! loads above `griddepcontrol.wait` when the PTX lets it, which would read the previous
//! kernel's output before that kernel finishes.
//!
//! `ptxas` is found through `POOT_PTXAS`, then `PATH`, then the `nvidia-cuda-nvcc-cu12` pip
//! package (`pip install nvidia-cuda-nvcc-cu12==12.9.86`); `cuobjdump` through
//! `POOT_CUOBJDUMP`, then `PATH`, then the `nvidia-cuda-cuobjdump` pip package (with
//! `nvidia-cuda-nvdisasm`, 13.5.37). Without one, its test prints `SKIP <tool> not found`
//! and passes, unless `POOT_REQUIRE_PTXAS=1` / `POOT_REQUIRE_CUOBJDUMP=1`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn works(tool: &Path) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `name` from the environment variable `var`, `PATH`, or the `bin` folder of the pip
/// package `module` (a namespace package: it has `__path__` but no `__file__`).
fn find(var: &str, name: &str, module: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        assert!(works(&p), "{var}={} does not run", p.display());
        return Some(p);
    }
    let on_path = PathBuf::from(name);
    if works(&on_path) {
        return Some(on_path);
    }
    let code = format!("import {module} as m; print(list(m.__path__)[0])");
    let out = Command::new("python3").args(["-c", &code]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let p = Path::new(dir.trim()).join("bin").join(name);
    works(&p).then_some(p)
}

/// The tool, or `None` after printing `SKIP` (a failure when `require` is set to 1).
fn tool(var: &str, name: &str, module: &str, require: &str, hint: &str) -> Option<PathBuf> {
    let found = find(var, name, module);
    if found.is_none() {
        assert!(
            std::env::var(require).as_deref() != Ok("1"),
            "{require}=1 but {name} was not found (set {var} or {hint})"
        );
        println!("SKIP {name} not found");
    }
    found
}

fn ptxas() -> Option<PathBuf> {
    tool(
        "POOT_PTXAS",
        "ptxas",
        "nvidia.cuda_nvcc",
        "POOT_REQUIRE_PTXAS",
        "pip install nvidia-cuda-nvcc-cu12",
    )
}

fn cuobjdump() -> Option<PathBuf> {
    tool(
        "POOT_CUOBJDUMP",
        "cuobjdump",
        "nvidia.cu13",
        "POOT_REQUIRE_CUOBJDUMP",
        "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm",
    )
}

/// The goldens, sorted, with their `ptxas` architecture.
fn goldens() -> Vec<(PathBuf, String, &'static str)> {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&root).join("../snapshots/ptx");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no goldens in {}", dir.display());
    files
        .into_iter()
        .map(|f| {
            let stem = f.file_stem().unwrap().to_string_lossy().to_string();
            let arch = match stem.rsplit_once('-') {
                Some((_, "sm80")) => "sm_80",
                Some((_, "sm90")) => "sm_90",
                _ => panic!("{stem}: golden name does not end in -sm80 or -sm90"),
            };
            (f, stem, arch)
        })
        .collect()
}

/// Assembles golden `f` for `arch` into `out` (a cubin, or `/dev/null`); ptxas's complaint
/// on failure.
fn assemble(ptxas: &Path, f: &Path, arch: &str, tmp: &Path, out: &Path) -> Result<(), String> {
    let stem = f.file_stem().unwrap().to_string_lossy();
    let text = std::fs::read_to_string(f).unwrap();
    let ptx = tmp.join(format!("{stem}.ptx"));
    std::fs::write(&ptx, snapshot_body(&text)).unwrap();
    let run = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&ptx)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", ptxas.display()));
    if run.status.success() {
        Ok(())
    } else {
        Err(format!("{stem}: {}", String::from_utf8_lossy(&run.stderr)))
    }
}

fn scratch(what: &str) -> PathBuf {
    let tmp = std::env::temp_dir().join(format!("poot-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
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
    let Some(ptxas) = ptxas() else { return };
    let tmp = scratch("ptxas");
    let mut failures = Vec::new();
    for (f, stem, arch) in goldens() {
        match assemble(&ptxas, &f, arch, &tmp, Path::new("/dev/null")) {
            Ok(()) => println!("ok {stem} ({arch})"),
            Err(e) => failures.push(e),
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        failures.is_empty(),
        "ptxas rejected:\n{}",
        failures.join("\n")
    );
}

/// The opcode of a `cuobjdump -sass` instruction line (`/*0040*/ @!P0 LDG.E R2, ...`).
fn opcode(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("/*")?;
    let (_, rest) = rest.split_once("*/")?;
    rest.split_whitespace().find(|w| !w.starts_with('@'))
}

/// Whether `op` reads or writes global (or generic) memory: loads and stores other than
/// the constant bank's (`LDC`, the kernel parameters) and shared memory's, atomics,
/// reductions, bulk copies and prefetches, fences.
fn global_memory(op: &str) -> bool {
    let base = op.split('.').next().unwrap_or(op);
    matches!(
        base,
        "LD" | "ST" | "LDG" | "STG" | "ATOM" | "ATOMG" | "RED" | "REDG" | "LDGSTS" | "MEMBAR"
    ) || base.starts_with("UBLK")
        || base.starts_with("UTMA")
}

/// Assembles sm_90 golden `f` and checks its SASS: a grid wait, and before it no global
/// memory instruction but L2 prefetches, at most as many plain loads as the PTX places
/// before its first wait (a kernel that places its own wait loads its weights there; ptxas
/// must not add any), and at most as many read-only loads (`LDG...CONSTANT`) as it places
/// there plus those a kernel that places its own wait has after it: there only the
/// parameters its wait lists load through `ld.global.nc`, memory no dispatch writes, which
/// ptxas may move above the wait.
fn check_wait(
    ptxas: &Path,
    cuobjdump: &Path,
    f: &Path,
    stem: &str,
    arch: &str,
    tmp: &Path,
) -> Result<String, String> {
    let cubin = tmp.join(format!("{stem}.cubin"));
    assemble(ptxas, f, arch, tmp, &cubin)?;
    let out = Command::new(cuobjdump)
        .arg("-sass")
        .arg(&cubin)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", cuobjdump.display()));
    if !out.status.success() {
        return Err(format!("{stem}: cuobjdump failed"));
    }
    let sass = String::from_utf8_lossy(&out.stdout);
    let ops: Vec<&str> = sass.lines().filter_map(opcode).collect();
    let ptx = std::fs::read_to_string(f).map_err(|e| format!("{stem}: {e}"))?;
    // Plain and read-only loads before the first wait, and read-only ones after it.
    let (mut plain, mut nc, mut nc_after, mut past) = (0, 0, 0, false);
    for l in ptx.lines().map(str::trim) {
        if l == "griddepcontrol.wait;" {
            past = true;
        } else if l.starts_with("ld.global.nc") {
            *if past { &mut nc_after } else { &mut nc } += 1;
        } else if l.starts_with("ld.global") && !past {
            plain += 1;
        }
    }
    // Only a kernel that places its own wait (loads before it) lists parameters.
    let listed = if plain + nc > 0 { nc_after } else { 0 };
    judge(&ops, [plain, nc + listed], stem)
}

/// The verdict on SASS opcodes `ops` of a kernel whose PTX places `placed` plain loads
/// before its first wait and has `listed` read-only loads that may stand there (those it
/// places there, and a kernel placing its own wait, those of its listed parameters after it).
fn judge(ops: &[&str], [placed, listed]: [usize; 2], stem: &str) -> Result<String, String> {
    let wait = ops
        .iter()
        .position(|&op| op == "ACQBULK")
        .ok_or_else(|| format!("{stem}: no grid wait (ACQBULK)"))?;
    let before = &ops[..wait];
    let loads = before.iter().filter(|op| op.starts_with("LDG"));
    let read_only = loads.clone().filter(|op| op.contains(".CONSTANT")).count();
    let plain = loads.count() - read_only;
    let other = before
        .iter()
        .find(|op| global_memory(op) && !op.starts_with("LDG") && !op.starts_with("UBLKPF"));
    match other {
        Some(op) => Err(format!("{stem}: {op} before the grid wait")),
        None if plain > placed => Err(format!(
            "{stem}: {plain} loads before the grid wait where the PTX places {placed}"
        )),
        None if read_only > listed => Err(format!(
            "{stem}: {read_only} read-only loads before the grid wait where the PTX has \
             {listed} that may stand there"
        )),
        None => Ok(format!(
            "ok {stem}: wait at {wait} of {}, {plain} loads and {read_only} read-only loads \
             before it",
            ops.len()
        )),
    }
}

#[test]
fn grid_wait_precedes_global_memory() {
    let Some(ptxas) = ptxas() else { return };
    let Some(cuobjdump) = cuobjdump() else { return };
    let tmp = scratch("sass");
    // nvdisasm takes most of a second a kernel: one thread per core.
    let sm90: Vec<_> = goldens().into_iter().filter(|g| g.2 == "sm_90").collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results: Vec<Result<String, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (sm90, tmp, ptxas, cuobjdump) = (&sm90, &tmp, &ptxas, &cuobjdump);
                s.spawn(move || {
                    sm90.iter()
                        .skip(t)
                        .step_by(threads)
                        .map(|(f, stem, arch)| check_wait(ptxas, cuobjdump, f, stem, arch, tmp))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a checking thread panicked"))
            .collect()
    });
    let checked = results.len();
    let mut failures = Vec::new();
    for r in results {
        match r {
            Ok(line) => println!("{line}"),
            Err(e) => failures.push(e),
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(checked > 0, "no sm_90 goldens");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The check fails a kernel that touches memory before its wait and one without a wait; it
/// passes one that waits first, and ones that load before their wait as their PTX says.
#[test]
fn the_wait_check_catches_a_load_before_the_wait() {
    let Some(ptxas) = ptxas() else { return };
    let Some(cuobjdump) = cuobjdump() else { return };
    let kernel = |body: &str| {
        format!(
            "---\nsource: test\n---\n.version 8.0\n.target sm_90\n.address_size 64\n\n\
             .visible .entry k(.param .u64 p0)\n{{\n\t.reg .b32 %r<2>;\n\t.reg .b64 %rd<1>;\n\
             \tld.param.u64 %rd0, [p0];\n\tcvta.to.global.u64 %rd0, %rd0;\n{body}\tret;\n}}\n"
        )
    };
    let load = "\tld.global.nc.u32 %r0, [%rd0];\n";
    let plain = "\tld.global.u32 %r0, [%rd0];\n";
    let store = "\tadd.u32 %r1, %r0, 1;\n\tst.global.u32 [%rd0+4], %r1;\n";
    let wait = "\tgriddepcontrol.wait;\n";
    // A read-only load before the wait, then a plain load after it: ptxas must keep the
    // plain load below the wait (what a kernel that places its own wait relies on).
    let listed = format!(
        "\tld.global.nc.u32 %r1, [%rd0+8];\n{wait}{plain}\tadd.u32 %r1, %r0, %r1;\n\
         \tst.global.u32 [%rd0+4], %r1;\n"
    );
    // A plain load before the wait, as a kernel that places its own wait loads its weights.
    let weights = format!(
        "\tld.global.u32 %r1, [%rd0+8];\n{wait}{load}\tadd.u32 %r1, %r0, %r1;\n\
         \tst.global.u32 [%rd0+4], %r1;\n"
    );
    let tmp = scratch("wait-check");
    let cases = [
        (
            "early",
            format!("{load}{store}{wait}"),
            Some("before the grid wait"),
        ),
        ("nowait", format!("{load}{store}"), Some("no grid wait")),
        ("good", format!("{wait}{load}{store}"), None),
        ("weights", weights, None),
        ("listed", listed, None),
    ];
    for (name, body, wrong) in cases {
        let f = tmp.join(format!("{name}-sm90.snap"));
        std::fs::write(&f, kernel(&body)).unwrap();
        let got = check_wait(&ptxas, &cuobjdump, &f, name, "sm_90", &tmp);
        match wrong {
            Some(what) => {
                let e = got.expect_err(name);
                assert!(e.contains(what), "{name}: {e}");
            }
            None => assert!(got.is_ok(), "{name}: {got:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A load ptxas hoisted above the wait (more loads before it in the SASS than the PTX places
/// there) fails the check, as does a store; prefetches and the placed loads pass.
#[test]
fn the_verdict_counts_the_loads_before_the_wait() {
    let ops = ["S2R", "LDG.E", "UBLKPF.L2", "ACQBULK", "LDG.E.128", "STG.E"];
    assert!(judge(&ops, [1, 0], "k").is_ok());
    let e = judge(&["S2R", "LDG.E", "LDG.E", "ACQBULK"], [1, 0], "k").unwrap_err();
    assert!(
        e.contains("2 loads before the grid wait where the PTX places 1"),
        "{e}"
    );
    // A listed parameter's read-only load moved above the wait is allowed, one more is not.
    let hoisted = ["S2R", "LDG.E", "LDG.E.CONSTANT", "ACQBULK", "STG.E"];
    assert!(judge(&hoisted, [1, 1], "k").is_ok());
    let e = judge(&hoisted, [1, 0], "k").unwrap_err();
    assert!(
        e.contains("1 read-only loads before the grid wait where the PTX has 0"),
        "{e}"
    );
    let e = judge(&["STG.E", "ACQBULK"], [0, 0], "k").unwrap_err();
    assert!(e.contains("STG.E before the grid wait"), "{e}");
    let e = judge(&["LDG.E"], [1, 0], "k").unwrap_err();
    assert!(e.contains("no grid wait"), "{e}");
}
