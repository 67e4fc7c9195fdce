//! The compile check (claim 8) on the pinned tree, and its power: an injected
//! error in the host source or in an instantiation line must fail it.

use std::path::Path;

use metal_sim::compile::Compiler;
use metal_sim::extract::{HOST_SOURCE, METAL_SOURCE};
use metal_sim::syntax;

fn compiler() -> Compiler {
    Compiler::detect(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("metal-sim-cache")).unwrap()
}

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Replaces the only occurrence of `from` in `path` of a copy of `files`.
fn edit(files: &metal_sim::TreeFiles, path: &str, from: &str, to: &str) -> metal_sim::TreeFiles {
    let mut out = files.clone();
    let text = &files.files[path];
    assert_eq!(text.matches(from).count(), 1, "{from:?} in {path}");
    out.files.insert(path.into(), text.replacen(from, to, 1));
    out.label = format!("{}-broken", files.label);
    out
}

#[test]
fn patched_tree_compiles_and_injected_errors_fail() {
    let p = metal_sim::pinned::load(workspace(), None).unwrap();
    let c = compiler();
    let r = syntax::check(&p.patched, &c, true).unwrap();
    println!(
        "host {:?}\nkernels {:?}\n{} instantiations, {} compiled ({} streamed)",
        r.host,
        r.kernels,
        r.instantiations.len(),
        r.compiled,
        r.streamed
    );
    assert!(r.host.ok, "{}", r.host.errors);
    assert!(r.kernels.ok, "{}", r.kernels.errors);
    // Quick: gs 64, bits 3 and 4, three types, 16 streamed lines each.
    assert_eq!(r.streamed, 3 * 2 * 16);

    // A type error in the policy dispatch of the host source.
    let broken = edit(
        &p.patched,
        HOST_SOURCE,
        "auto policy = mode == \"affine\" ? metal::qmv_batch_policy()",
        "auto policy = mode == \"affine\" ? metal::qmv_batch_policy(1)",
    );
    let r = syntax::check(&broken, &c, true).unwrap();
    assert!(!r.host.ok);
    assert!(r.host.errors.contains(HOST_SOURCE), "{}", r.host.errors);
    assert!(r.kernels.ok);

    // An instantiation line with one macro argument too many (preprocessor).
    let broken = edit(
        &p.patched,
        METAL_SOURCE,
        "instantiate_quantized_streamed(affine_qmv_streamed, type, group_size, bits, V, 0)",
        "instantiate_quantized_streamed(affine_qmv_streamed, type, group_size, bits, V, 0, 1)",
    );
    let r = syntax::check(&broken, &c, true).unwrap();
    assert!(!r.kernels.ok);
    assert!(
        r.kernels.errors.contains("passed 7 arguments"),
        "{}",
        r.kernels.errors
    );

    // A template argument of the wrong type in a streamed instantiation: the
    // expanded lines are compiled, not just preprocessed.
    let broken = edit(
        &p.patched,
        METAL_SOURCE,
        "instantiate_quantized_streamed_wrap(type, group_size, bits, 3)",
        "instantiate_quantized_streamed_wrap(type, group_size, bits, 3.5)",
    );
    let r = syntax::check(&broken, &c, true).unwrap();
    assert!(!r.kernels.ok);
    assert!(
        r.kernels.errors.contains("quantized.metal"),
        "{}",
        r.kernels.errors
    );
    assert!(r.host.ok);
}
