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
        if c.id == "5" {
            // The streamed kernel is not in the pinned tree yet.
            assert_eq!(c.status, Status::NotEvaluated, "{c:?}");
            assert!(c.detail.contains("not present"), "{c:?}");
        } else {
            assert_eq!(c.status, Status::Pass, "{c:?}");
        }
    }
    assert!(report.ok());
}
