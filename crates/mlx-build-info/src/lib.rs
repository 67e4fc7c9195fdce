//! `<workspace>/target/mlx/build-info.json`, the one contract between the MLX build driver
//! (`mlx-build`, which writes it) and `crates/mlx-sys/build.rs` (which reads it and never runs git
//! or CMake). Serde types only, so the build script reads it without the driver's dependencies.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// Which MLX backend a build is for.
pub enum Backend {
    Cpu,
    Metal,
    Cuda,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Metal => "metal",
            Backend::Cuda => "cuda",
        }
    }

    /// Metal on macOS (the reason MLX exists), CPU elsewhere: CUDA must be asked for.
    pub fn host_default() -> Self {
        if cfg!(target_os = "macos") {
            Backend::Metal
        } else {
            Backend::Cpu
        }
    }
}

#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// The CMake build type.
pub enum Profile {
    Release,
    Debug,
    #[cfg_attr(feature = "clap", value(name = "relwithdebinfo"))]
    RelWithDebInfo,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Debug => "debug",
            Profile::RelWithDebInfo => "relwithdebinfo",
        }
    }

    /// CMake's `CMAKE_BUILD_TYPE` for this profile.
    pub fn cmake_build_type(self) -> &'static str {
        match self {
            Profile::Release => "Release",
            Profile::Debug => "Debug",
            Profile::RelWithDebInfo => "RelWithDebInfo",
        }
    }
}

/// `<workspace>/target/mlx/build-info.json`: the contract with `crates/mlx-sys/build.rs`.
///
/// `libs` entries use cargo's `rustc-link-lib` syntax (`static=mlx`, `dylib=openblas`,
/// `framework=Metal`) in link order; `link_search` are `rustc-link-search=native` dirs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// Full build key (dir key + series hash + FetchContent overrides).
    pub key: String,
    /// Cache directory key (without the series hash).
    pub dir_key: String,
    pub upstream: String,
    pub pin: String,
    pub series_hash: String,
    pub backend: Backend,
    pub profile: Profile,
    pub include_dir: PathBuf,
    pub lib_dir: PathBuf,
    pub libs: Vec<String>,
    pub link_search: Vec<PathBuf>,
    pub defines: Vec<String>,
    /// The C++ standard the headers need (`c++20` when an older file lacks it).
    #[serde(default = "default_cxx_std")]
    pub cxx_std: String,
}

fn default_cxx_std() -> String {
    "c++20".to_string()
}
