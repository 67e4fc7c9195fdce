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

fn status(report: &metal_sim::Report, id: &str) -> Status {
    let c = report.claims.iter().find(|c| c.id == id).unwrap();
    println!("{id}: {:?} {}", c.status, c.detail);
    c.status
}

/// The series lists the streamed overlays (0003-0005): every claim, 5 and 7
/// included, must pass on the pinned tree. Then claim 5 must fail when the
/// streamed twin of qmv_fast takes qmv's K-to-lane mapping (one pack per
/// lane): the claim can tell an order change from identity. One test, so the
/// unperturbed binaries are compiled once and shared through the cache.
#[test]
fn pinned_tree_passes_every_claim_and_claim_5_has_power() {
    let p = metal_sim::pinned::load(workspace(), None).unwrap();
    let report = metal_sim::run(&p.patched, Some(&p.pristine), &options()).unwrap();
    println!("{}", report.table());
    for (phase, s) in &report.timings {
        println!("  {phase}: {s:.1}s");
    }
    for id in ["0", "1", "2a", "2b", "2c", "3", "4", "5", "6", "7", "8"] {
        assert_eq!(status(&report, id), Status::Pass, "claim {id}");
    }
    assert!(report.ok());

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
    assert!(!report.ok());
    // The dispatch is untouched, and so are the M=1 kernels.
    assert_eq!(status(&report, "7"), Status::Pass);
    assert_eq!(status(&report, "1"), Status::Pass);
}
