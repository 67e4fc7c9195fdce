//! `build-mlx` on small CMake projects standing in for MLX (real cmake, Ninja, compilers and
//! ccache): a pin bump reuses the compiler cache for unchanged translation units, and a build
//! killed mid-way never has a second Ninja running in its tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture::Fixture;

const CMAKE_HEAD: &str = "cmake_minimum_required(VERSION 3.25)\nproject(mlx CXX)\n";
const CMAKE_INSTALL: &str = "install(TARGETS mlx EXPORT MLXTargets ARCHIVE DESTINATION lib)\n\
     install(FILES mlx.h DESTINATION include/mlx)\n\
     install(EXPORT MLXTargets FILE MLXTargets.cmake DESTINATION share/cmake/MLX)\n";

/// ccache's counters for `dir` (`ccache --print-stats`), by name.
fn ccache_stats(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    let out = Command::new("ccache")
        .arg("--print-stats")
        .env("CCACHE_DIR", dir)
        .output()
        .expect("ccache is a build-mlx dependency (apt-get install ccache)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('\t')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn hits(s: &std::collections::BTreeMap<String, u64>) -> u64 {
    s.get("direct_cache_hit").copied().unwrap_or(0)
        + s.get("preprocessed_cache_hit").copied().unwrap_or(0)
}

fn build_dirs(f: &Fixture) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(f.cache.join("builds"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("build").is_dir())
        .collect();
    v.sort();
    v
}

/// Issue 13, "Build cache across pins": each pin gets its own build tree; a bump that changes one
/// of two translation units must compile just that one, the other coming from ccache although
/// its absolute path is different (before: 0 hits, both compiled again).
#[test]
fn a_bump_reuses_ccache_for_unchanged_translation_units() {
    let cmake = format!("{CMAKE_HEAD}add_library(mlx STATIC a.cpp b.cpp)\n{CMAKE_INSTALL}");
    let f = Fixture::new(&[
        ("CMakeLists.txt", &cmake),
        ("mlx.h", "int mlx_a();\nint mlx_b();\n"),
        ("a.cpp", "#include \"mlx.h\"\nint mlx_a() { return 1; }\n"),
        ("b.cpp", "#include \"mlx.h\"\nint mlx_b() { return 2; }\n"),
    ]);
    let next = f.commit_upstream(
        &[("b.cpp", "#include \"mlx.h\"\nint mlx_b() { return 3; }\n")],
        "change b only",
    );
    let ccache = f.t().join("ccache");
    let env = [("CCACHE_DIR", ccache.to_str().unwrap())];
    f.xtask_env(&["build-mlx"], &env).ok();
    let cold = ccache_stats(&ccache);
    assert_eq!(
        (hits(&cold), cold["cache_miss"]),
        (0, 2),
        "a cold build compiles both: {cold:?}"
    );
    f.xtask(&["bump-pin", &next]).ok();
    let z = Command::new("ccache")
        .arg("-z")
        .env("CCACHE_DIR", &ccache)
        .output()
        .unwrap();
    assert!(z.status.success());
    let out = f.xtask_env(&["build-mlx", "--json"], &env).ok();
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["status"], "built", "{}", out.stdout);
    assert_eq!(build_dirs(&f).len(), 2, "one build tree per pin");
    let bump = ccache_stats(&ccache);
    assert_eq!(
        (hits(&bump), bump["cache_miss"]),
        (1, 1),
        "after the bump a.cpp (unchanged) hits and b.cpp compiles: {bump:?}"
    );
}
