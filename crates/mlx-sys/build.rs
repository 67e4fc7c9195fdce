//! Links the MLX static library installed by `cargo xtask build-mlx` and compiles the cxx
//! bridge. It never runs git, applies patches or configures CMake: all it knows about MLX
//! comes from `build-info.json` (see docs/build.md).

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=MLX_SYS_BUILD_INFO");
    for f in [
        "src/ffi.rs",
        "src/mlx_sys.cc",
        "include/mlx_sys.h",
        "probe/exactness.cc",
        "probe/exactness.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    let info = read_build_info();
    let include_dir = &info.include_dir;
    compile_bridge(&info);
    // The Metal policy switch (overlay 0005) only exists in Metal builds of MLX.
    if std::env::var_os("CARGO_FEATURE_METAL").is_some() {
        compile_metal_policy(include_dir, &info.cxx_std);
    }
    // After the bridge so the linker sees MLX after the objects that use it.
    link(&info);
    // Exposed to dependents' build scripts as DEP_MLX_INCLUDE (links = "mlx").
    println!("cargo:include={}", include_dir.display());
}

/// build-info.json as build-mlx wrote it (or at `MLX_SYS_BUILD_INFO`), its headers checked to be
/// there; a rebuild is asked for when it or the library it names changes.
fn read_build_info() -> mlx_build_info::BuildInfo {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let path = match std::env::var_os("MLX_SYS_BUILD_INFO") {
        Some(p) => PathBuf::from(p),
        None => workspace_root(&manifest).join("target/mlx/build-info.json"),
    };
    // Also emitted when the file is missing, so creating it triggers a rebuild.
    println!("cargo:rerun-if-changed={}", path.display());
    let info = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => fail(&format!(
            "cannot read MLX build info {} ({e}).\nRun `cargo xtask build-mlx` first \
             (or point MLX_SYS_BUILD_INFO at a build-info.json).",
            path.display()
        )),
    };
    // The type build-mlx writes (crates/mlx-build-info): a missing or mistyped field is named.
    let info: mlx_build_info::BuildInfo = serde_json::from_slice(&info).unwrap_or_else(|e| {
        fail(&format!(
            "{} is not a build-info.json ({e}); rerun `cargo xtask build-mlx`",
            path.display()
        ))
    });
    if !info.include_dir.join("mlx/mlx.h").is_file() {
        fail(&format!(
            "{} names include_dir {} but mlx/mlx.h is not there; rerun `cargo xtask build-mlx`",
            path.display(),
            info.include_dir.display()
        ));
    }
    // libmlx.a is bundled into this crate's rlib, so a rebuilt MLX must rebuild us.
    let mlx_lib = info
        .lib_dir
        .join(if cfg!(windows) { "mlx.lib" } else { "libmlx.a" });
    println!("cargo:rerun-if-changed={}", mlx_lib.display());
    info
}

/// The cxx bridge and the exactness probe, with MLX's definitions and the CPU policy switch when
/// the series has it.
fn compile_bridge(info: &mlx_build_info::BuildInfo) {
    // The fork's CPU policy switch (a local overlay) is optional, so that a series without
    // it still links; the bridge then reports it unavailable.
    let policy_header = info.include_dir.join("mlx/backend/cpu/quantized_policy.h");
    println!("cargo:rerun-if-changed={}", policy_header.display());
    let has_policy = policy_header.is_file();

    let mut build = cxx_build::bridge("src/ffi.rs");
    build
        .file("src/mlx_sys.cc")
        .file("probe/exactness.cc")
        .include(&info.include_dir)
        .std(&info.cxx_std);
    for d in &info.defines {
        match d.split_once('=') {
            Some((k, v)) => build.define(k, v),
            None => build.define(d, None),
        };
    }
    build.define("MLX_SYS_QMM_POLICY", if has_policy { "1" } else { "0" });
    // MLX headers are not warning-clean under -Wextra; keep our own output readable.
    build.flag_if_supported("-Wno-unused-parameter");
    build.compile("mlx_sys_bridge");
}

/// The Metal policy bridge (the `metal` feature).
fn compile_metal_policy(include_dir: &Path, cxx_std: &str) {
    for f in [
        "src/metal_policy.rs",
        "src/metal_policy.cc",
        "src/metal_policy.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    cxx_build::bridge("src/metal_policy.rs")
        .file("src/metal_policy.cc")
        .include(include_dir)
        .std(cxx_std)
        .compile("mlx_sys_metal_policy");
}

/// MLX's libraries and their folders, then the C++ runtime MLX needs after them.
fn link(info: &mlx_build_info::BuildInfo) {
    for dir in &info.link_search {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in &info.libs {
        println!("cargo:rustc-link-lib={lib}");
    }
    // MLX is C++: its C++ runtime must follow it on the link line.
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    match target_os.as_str() {
        "macos" | "ios" => println!("cargo:rustc-link-lib=dylib=c++"),
        "windows" => {}
        _ => println!("cargo:rustc-link-lib=dylib=stdc++"),
    }
}

/// The nearest ancestor whose Cargo.toml declares `[workspace]`, else two levels up
/// (`crates/mlx-sys` -> workspace root).
fn workspace_root(manifest: &Path) -> PathBuf {
    manifest
        .ancestors()
        .skip(1)
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
        })
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.join("../.."))
}

fn fail(msg: &str) -> ! {
    eprintln!("error: mlx-sys: {msg}");
    std::process::exit(1);
}
