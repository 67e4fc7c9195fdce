//! MLX's build dependencies: what its CPU, Metal and CUDA builds need, the message saying how to
//! get them, and `--install-deps` (the pipeline's package managers).

use std::fmt::Write as _;
use std::path::Path;

use build_pipeline::cmake::runs;
use build_pipeline::deps::{
    Packages, Platform, cmake_at_least, find_header, has_lib, install_command, install_packages,
    is_root,
};
use build_pipeline::{Progress, Result, user_err};

use crate::Backend;

const MIN_CMAKE: (u32, u32) = (3, 25);

/// A missing build dependency, named as the user would look for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dep {
    Cmake,
    Ninja,
    Cxx,
    Blas,
    Lapack,
    Fmt,
    Json,
    Metal,
    Nvcc,
    Cudnn,
}

impl Dep {
    fn describe(self) -> &'static str {
        match self {
            Dep::Cmake => "cmake >= 3.25",
            Dep::Ninja => "ninja",
            Dep::Cxx => "a C++20 compiler (c++ or $CXX)",
            Dep::Blas => "BLAS (OpenBLAS: cblas.h + libopenblas/libblas)",
            Dep::Lapack => "LAPACK with lapack.h (LAPACKE headers)",
            Dep::Fmt => "fmt (headers + CMake package)",
            Dep::Json => "nlohmann-json (nlohmann/json.hpp)",
            Dep::Metal => "Metal toolchain (`xcrun -sdk macosx metal`)",
            Dep::Nvcc => "CUDA toolkit (nvcc)",
            Dep::Cudnn => "cuDNN (cudnn.h)",
        }
    }
}

/// What MLX's `backend` build needs that this machine lacks.
pub fn check_deps(platform: &Platform, backend: Backend) -> Vec<Dep> {
    let mut missing = Vec::new();
    if !cmake_at_least(MIN_CMAKE) {
        missing.push(Dep::Cmake);
    }
    if !runs("ninja", &["--version"]) {
        missing.push(Dep::Ninja);
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !runs(&cxx, &["--version"]) {
        missing.push(Dep::Cxx);
    }
    // macOS uses Accelerate for BLAS/LAPACK, found by MLX itself.
    if *platform != Platform::MacOs {
        if find_header("cblas.h").is_none() || !has_lib(&["openblas", "blas"]) {
            missing.push(Dep::Blas);
        }
        if find_header("lapack.h").is_none() || !has_lib(&["openblas", "lapack"]) {
            missing.push(Dep::Lapack);
        }
    }
    if find_header("fmt/format.h").is_none() {
        missing.push(Dep::Fmt);
    }
    if find_header("nlohmann/json.hpp").is_none() {
        missing.push(Dep::Json);
    }
    match backend {
        Backend::Metal => {
            if !runs("xcrun", &["-sdk", "macosx", "metal", "--version"]) {
                missing.push(Dep::Metal);
            }
        }
        Backend::Cuda => {
            let nvcc = std::env::var("CUDACXX").unwrap_or_else(|_| "nvcc".into());
            if !runs(&nvcc, &["--version"]) && !runs("/usr/local/cuda/bin/nvcc", &["--version"]) {
                missing.push(Dep::Nvcc);
            }
            if find_header("cudnn.h").is_none()
                && !Path::new("/usr/local/cuda/include/cudnn.h").is_file()
            {
                missing.push(Dep::Cudnn);
            }
        }
        Backend::Cpu => {}
    }
    missing
}

const APT_PACKAGES: &[&str] = &[
    "cmake",
    "ninja-build",
    "libopenblas-dev",
    "liblapacke-dev",
    "libfmt-dev",
    "nlohmann-json3-dev",
    "ccache",
];
const BREW_PACKAGES: &[&str] = &["cmake", "ninja", "fmt", "nlohmann-json", "ccache"];

/// MLX's packages, per package manager.
const PACKAGES: Packages<'static> = Packages {
    apt: APT_PACKAGES,
    brew: BREW_PACKAGES,
};

/// What is missing and how to install it, as the user reads it.
pub fn missing_deps_message(platform: &Platform, backend: Backend, missing: &[Dep]) -> String {
    let mut s = String::from("missing build dependencies for MLX:\n");
    for d in missing {
        let _ = writeln!(s, "  - {}", d.describe());
    }
    let platform_fixable = missing
        .iter()
        .any(|d| !matches!(d, Dep::Metal | Dep::Nvcc | Dep::Cudnn));
    if platform_fixable {
        match install_command(platform, is_root(), PACKAGES) {
            Some(cmd) => {
                let _ = writeln!(s, "install them with:\n  {cmd}");
                s.push_str("or rerun with --install-deps\n");
            }
            None => s.push_str(
                "install cmake, ninja, a C++20 compiler, OpenBLAS + LAPACKE headers, fmt and \
                 nlohmann-json with your package manager\n",
            ),
        }
    }
    if missing.contains(&Dep::Metal) {
        s.push_str(
            "the Metal compiler comes with Xcode: install Xcode, run `xcode-select -s \
             /Applications/Xcode.app`, and on Xcode 26+ `xcodebuild -downloadComponent MetalToolchain`\n",
        );
    }
    if backend == Backend::Cuda && (missing.contains(&Dep::Nvcc) || missing.contains(&Dep::Cudnn)) {
        s.push_str(
            "install the CUDA toolkit and cuDNN from NVIDIA's repositories (not automated)\n",
        );
    }
    s.trim_end().to_string()
}

/// `--install-deps`: installs MLX's packages when something is missing, then checks again.
pub fn install_deps(
    platform: &Platform,
    backend: Backend,
    progress: &mut dyn Progress,
) -> Result<()> {
    let missing = check_deps(platform, backend);
    if missing.is_empty() {
        progress.message("build dependencies already installed");
        return Ok(());
    }
    if !install_packages(platform, PACKAGES, progress)? {
        return Err(user_err(format!(
            "--install-deps does not know this platform's package manager.\n{}",
            missing_deps_message(platform, backend, &missing)
        )));
    }
    let still = check_deps(platform, backend);
    if !still.is_empty() {
        return Err(user_err(missing_deps_message(platform, backend, &still)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_commands_render_per_platform() {
        assert_eq!(
            install_command(&Platform::Debian, true, PACKAGES).unwrap(),
            "apt-get update && apt-get install -y cmake ninja-build libopenblas-dev liblapacke-dev \
             libfmt-dev nlohmann-json3-dev ccache"
        );
        assert!(
            install_command(&Platform::Debian, false, PACKAGES)
                .unwrap()
                .starts_with("sudo apt-get update && sudo apt-get install -y cmake")
        );
        assert_eq!(
            install_command(&Platform::MacOs, false, PACKAGES).unwrap(),
            "brew install cmake ninja fmt nlohmann-json ccache"
        );
        let msg = missing_deps_message(&Platform::Debian, Backend::Cpu, &[Dep::Ninja, Dep::Fmt]);
        assert!(msg.contains("  - ninja\n"), "{msg}");
        assert!(msg.contains("apt-get install -y"), "{msg}");
        let cuda = missing_deps_message(&Platform::Debian, Backend::Cuda, &[Dep::Nvcc]);
        assert!(!cuda.contains("apt-get"), "{cuda}");
        assert!(cuda.contains("CUDA toolkit"), "{cuda}");
    }
}
