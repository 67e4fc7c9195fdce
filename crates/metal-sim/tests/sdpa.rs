//! MLX's SDPA vector kernels, block vs chain (claims 9 and 9c), on the pinned
//! tree read through the overlay engine.

use std::path::Path;

use metal_sim::{Claim, Options, Status};

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

fn status(claims: &[Claim], id: &str) -> Status {
    let c = claims.iter().find(|c| c.id == id).expect("claim present");
    println!("{id}: {:?} {}", c.status, c.detail);
    c.status
}

/// Claim 9 passes and its control 9c differs on the pinned tree (quick
/// matrix); then, with the streamed plan's block count taken from
/// n_simds = gqa * q_len as upstream does, claim 9 fails: it can tell.
#[test]
fn streamed_rows_identical_upstream_differs_and_claim_9_has_power() {
    let p = metal_sim::pinned::load(workspace(), None).expect("pinned tree");
    let t0 = std::time::Instant::now();
    let claims = metal_sim::run_sdpa(&p.patched, &p.pristine, &options()).expect("run");
    println!("quick: {:.1}s", t0.elapsed().as_secs_f64());
    assert_eq!(status(&claims, "9"), Status::Pass);
    assert_eq!(status(&claims, "9c"), Status::Pass);

    let perturbed = metal_sim::extract::perturb(
        &p.patched,
        metal_sim::sdpa::HOST,
        "sdpa_vector_row_runs",
        "sdpa_vector_blocks(devc, n, gqa_factor)",
        "sdpa_vector_blocks(devc, n, gqa_factor * q_len)",
    )
    .expect("perturbation site");
    let claims = metal_sim::run_sdpa(&perturbed, &p.pristine, &options()).expect("run");
    assert_eq!(status(&claims, "9"), Status::Fail);
}

/// The control emulates upstream's rule through the patched tree's helpers;
/// that is only valid while the pristine source carries the same rule text.
#[test]
fn upstream_rules_are_checked_against_the_pristine_source() {
    let p = metal_sim::pinned::load(workspace(), None).expect("pinned tree");
    let ok = metal_sim::upstream_sdpa_rules(&p.pristine, &p.patched);
    assert!(ok.is_ok(), "{ok:?}");
    let changed = metal_sim::extract::perturb(
        &p.pristine,
        metal_sim::sdpa::HOST,
        "sdpa_vector_2pass",
        "blocks = 128;",
        "blocks = 96;",
    )
    .expect("perturbation site");
    let err = metal_sim::upstream_sdpa_rules(&changed, &p.patched).expect_err("rule changed");
    assert!(err.contains("block-count rule"), "{err}");
}
