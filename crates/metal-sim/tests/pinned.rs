//! Fast subset against the pinned tree, materialized through the overlay engine.

use std::path::Path;

use metal_sim::{Options, Status};

fn options() -> Options {
    Options {
        quick: true,
        cache: Path::new(env!("CARGO_TARGET_TMPDIR")).join("metal-sim-cache"),
        seed: 1,
        jobs: 2,
    }
}

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn quick_matrix_on_the_pinned_tree() {
    let p = metal_sim::pinned::load(workspace(), None).unwrap();
    let report = metal_sim::run(&p.patched, Some(&p.pristine), &options()).unwrap();
    println!("{}", report.table());
    for c in &report.claims {
        if c.id == "5" || c.id == "7" {
            // The streamed kernel is not in the pinned tree yet.
            assert_eq!(c.status, Status::NotEvaluated, "{c:?}");
            assert!(c.detail.contains("not present"), "{c:?}");
        } else {
            assert_eq!(c.status, Status::Pass, "{c:?}");
        }
    }
    assert!(report.ok());
}

/// The order-preserving overlays (kernels, dispatch, policy), applied after
/// the series until the series lists them.
const STREAMED_OVERLAYS: &[&str] = &[
    "0003-metal-streamed-qmv-kernels.patch",
    "0004-metal-route-batched-qmv-to-streamed.patch",
    "0005-metal-qmv-batch-policy.patch",
];

fn status(report: &metal_sim::Report, id: &str) -> Status {
    let c = report.claims.iter().find(|c| c.id == id).unwrap();
    println!("{id}: {:?} {}", c.status, c.detail);
    c.status
}

/// Claims 5 and 7 hold on the streamed overlays, and claim 5 fails when the
/// streamed twin of qmv_fast takes qmv's K-to-lane mapping (one pack per
/// lane): the claim can tell an order change from identity.
#[test]
fn streamed_overlays_are_identical_and_the_claim_has_power() {
    let p = metal_sim::pinned::load_with(workspace(), None, STREAMED_OVERLAYS).unwrap();
    let report = metal_sim::run(&p.patched, Some(&p.pristine), &options()).unwrap();
    println!("{}", report.table());
    for c in &report.claims {
        assert_eq!(c.status, Status::Pass, "{c:?}");
    }

    let perturbed = metal_sim::extract::perturb(
        &p.patched,
        metal_sim::extract::KERNEL_HEADER,
        "qmv_fast_streamed_impl",
        "constexpr int packs_per_thread = bits == 2 ? 1 : 2;",
        "constexpr int packs_per_thread = 1;",
    )
    .unwrap();
    let report = metal_sim::run(&perturbed, Some(&p.pristine), &options()).unwrap();
    assert_eq!(status(&report, "5"), Status::Fail);
    // The dispatch is untouched, and so are the M=1 kernels.
    assert_eq!(status(&report, "7"), Status::Pass);
    assert_eq!(status(&report, "1"), Status::Pass);
}
