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

/// A streamed kernel written here (not MLX code): V vectors per threadgroup,
/// each through `inner`. With qmv_fast_impl it is identical by construction,
/// with qmv_impl it is not; claim 5 must tell them apart.
fn with_streamed(files: &metal_sim::TreeFiles, inner: &str) -> metal_sim::TreeFiles {
    let snippet = format!(
        "\ntemplate <typename T, int group_size, int bits, int V>\n\
         METAL_FUNC void qmv_fast_streamed_impl(\n\
             const device uint32_t* w, const device T* scales, const device T* biases,\n\
             const device T* x, device T* y, const constant int& in_vec_size,\n\
             const constant int& out_vec_size, const constant int& M,\n\
             uint3 tid, uint simd_gid, uint simd_lid) {{\n\
           for (int v = 0; v < V; v++) {{\n\
             int vec = min(int(tid.x) * V + v, M - 1);\n\
             {inner}<T, group_size, bits>(w, scales, biases, x + vec * in_vec_size,\n\
                 y + vec * out_vec_size, in_vec_size, out_vec_size,\n\
                 uint3{{0, tid.y, tid.z}}, simd_gid, simd_lid);\n\
           }}\n\
         }}\n"
    );
    let mut out = files.clone();
    let path = metal_sim::extract::KERNEL_HEADER;
    let text = out.files[path].clone() + &snippet;
    out.files.insert(path.to_string(), text);
    out
}

#[test]
fn streamed_identity_claim_is_evaluated_and_has_power() {
    let p = metal_sim::pinned::load(workspace(), None).unwrap();
    for (inner, want) in [("qmv_fast_impl", Status::Pass), ("qmv_impl", Status::Fail)] {
        let tree = with_streamed(&p.patched, inner);
        let report = metal_sim::run(&tree, Some(&p.pristine), &options()).unwrap();
        let c5 = report.claims.iter().find(|c| c.id == "5").unwrap();
        assert_eq!(c5.status, want, "{inner}: {c5:?}");
        assert!(c5.detail.contains("qmv_fast_streamed_impl"), "{c5:?}");
    }
}
