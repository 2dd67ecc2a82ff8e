//! Golden PTX: every case in `common` rendered for sm_80 and sm_90 and compared with
//! `snapshots/ptx/<case>-<target>.snap` (bless with `INSTA_UPDATE=always` or
//! `cargo insta review`); `ptxas.rs` assembles those files. Rendering is deterministic.

mod common;

use poot_codegen_ptx::{PtxTarget, render};
use poot_kir::Kernel;

fn targets() -> [(&'static str, PtxTarget); 2] {
    [("sm80", PtxTarget::sm80()), ("sm90", PtxTarget::sm90())]
}

#[test]
fn goldens() {
    for (case, kernel) in common::cases() {
        for (tag, target) in targets() {
            let text = render(&kernel, &target)
                .unwrap_or_else(|e| panic!("{case} on {tag}: {e}\n{}", poot_kir::print(&kernel)));
            assert_eq!(
                render(&kernel, &target).ok(),
                Some(text.clone()),
                "not deterministic"
            );
            let name = format!("{case}-{tag}");
            insta::with_settings!({
                snapshot_path => "../../snapshots/ptx",
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(name, text);
            });
        }
    }
}

#[test]
fn targets_differ_only_in_the_target_line_grid_dependency_prefetch_and_clusters() {
    let wait = "\tgriddepcontrol.wait;\n";
    let launch = "\tgriddepcontrol.launch_dependents;\n";
    let bulk = "cp.async.bulk.prefetch.L2.global";
    for (case, kernel) in common::cases() {
        let a = render(&kernel, &PtxTarget::sm80()).unwrap();
        let b = render(&kernel, &PtxTarget::sm90()).unwrap();
        assert!(!a.contains("griddepcontrol") && !a.contains(bulk), "{case}");
        assert_eq!(b.matches(wait).count(), 1, "{case}");
        let kir = poot_kir::print(&kernel);
        assert_eq!(
            b.matches(launch).count(),
            kir.matches("launch_dependents").count(),
            "{case}"
        );
        if kir.contains("clustered") {
            // sm_80 renders the form without clusters, sm_90 the clustered one.
            assert!(
                !a.contains(".cluster") && !a.contains("reqnctapercluster"),
                "{case}"
            );
            assert!(
                b.contains(".reqnctapercluster") && b.contains("mapa"),
                "{case}"
            );
        } else if kir.contains("prefetch") {
            assert!(b.contains(bulk), "{case}");
        } else {
            assert_eq!(
                a.replace("sm_80", "sm_90"),
                b.replacen(wait, "", 1).replace(launch, ""),
                "{case}"
            );
        }
    }
}

#[test]
fn cases_cover_kir() {
    let kernels: Vec<Kernel> = common::cases().into_iter().map(|(_, k)| k).collect();
    let missing = poot_kir::conformance::missing_coverage(&kernels);
    assert!(missing.is_empty(), "not covered: {missing:?}");
}
