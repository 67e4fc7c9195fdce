//! Build dependencies: the platform's package manager, headers and libraries where compilers look
//! for them, CMake's version, and installing a recipe's packages. Which dependencies a build
//! needs is the recipe's.

use std::path::PathBuf;
use std::process::Command;

use crate::Progress;
use crate::error::{Result, user_err};

/// The package manager a platform's build dependencies come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Debian,
    MacOs,
    Other,
}

impl Platform {
    /// This machine's: macOS, a Debian-like Linux (`/etc/os-release`), or another.
    pub fn detect() -> Self {
        if cfg!(target_os = "macos") {
            return Platform::MacOs;
        }
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        if is_debian_like(&os_release) {
            Platform::Debian
        } else {
            Platform::Other
        }
    }
}

fn is_debian_like(os_release: &str) -> bool {
    os_release.lines().any(|l| {
        let Some((k, v)) = l.split_once('=') else {
            return false;
        };
        (k == "ID" || k == "ID_LIKE")
            && v.trim_matches('"')
                .split_whitespace()
                .any(|id| id == "debian" || id == "ubuntu")
    })
}

/// The usual include folders (`CPATH` and friends first, Debian's multiarch and OpenBLAS's too).
pub fn include_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .flat_map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .collect();
    for d in [
        "/usr/local/include",
        "/usr/include",
        "/opt/homebrew/include",
    ] {
        dirs.push(PathBuf::from(d));
    }
    // Debian puts OpenBLAS's cblas.h under a multiarch directory.
    if let Ok(rd) = std::fs::read_dir("/usr/include") {
        dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu"))
        }));
    }
    for d in [
        "/usr/include/openblas",
        "/opt/homebrew/opt/openblas/include",
        "/usr/local/opt/openblas/include",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The first `rel` header under the usual include folders (`CPATH` and friends first).
pub fn find_header(rel: &str) -> Option<PathBuf> {
    include_dirs()
        .into_iter()
        .map(|d| d.join(rel))
        .find(|p| p.is_file())
}

/// The usual library folders (`LIBRARY_PATH` first, Debian's multiarch ones too).
pub fn lib_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    for d in [
        "/usr/local/lib",
        "/usr/lib",
        "/usr/lib64",
        "/lib",
        "/opt/homebrew/opt/openblas/lib",
        "/usr/local/opt/openblas/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    for base in ["/usr/lib", "/lib"] {
        if let Ok(rd) = std::fs::read_dir(base) {
            dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("-linux-gnu"))
            }));
        }
    }
    dirs
}

/// Whether `lib<name>.{so,a,dylib}` is in a library folder for one of `names`.
pub fn has_lib(names: &[&str]) -> bool {
    lib_dirs().iter().any(|d| {
        names.iter().any(|n| {
            ["so", "a", "dylib"]
                .iter()
                .any(|ext| d.join(format!("lib{n}.{ext}")).is_file())
        })
    })
}

/// Whether `cmake` runs and is at least `min` (major, minor).
pub fn cmake_at_least(min: (u32, u32)) -> bool {
    let Ok(out) = Command::new("cmake").arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    parse_cmake_version(&text).is_some_and(|v| v >= min)
}

/// `cmake version 3.25.1` -> (3, 25).
pub fn parse_cmake_version(text: &str) -> Option<(u32, u32)> {
    let v = text.lines().next()?.strip_prefix("cmake version ")?;
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The packages that install a build's dependencies, per package manager.
#[derive(Debug, Clone, Copy)]
pub struct Packages<'a> {
    pub apt: &'a [&'a str],
    pub brew: &'a [&'a str],
}

/// The command that installs `packages` on this platform, as the user should run it.
pub fn install_command(platform: &Platform, root: bool, packages: Packages<'_>) -> Option<String> {
    match platform {
        Platform::Debian => {
            let sudo = if root { "" } else { "sudo " };
            Some(format!(
                "{sudo}apt-get update && {sudo}apt-get install -y {}",
                packages.apt.join(" ")
            ))
        }
        Platform::MacOs => Some(format!("brew install {}", packages.brew.join(" "))),
        Platform::Other => None,
    }
}

/// Whether this process runs as root (no `sudo` in the install command then).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[cfg(unix)]
    return unsafe { libc::geteuid() } == 0;
    #[cfg(not(unix))]
    false
}

/// Installs `packages` with the platform's package manager (apt-get as root, brew), each command
/// announced on `progress`. `Ok(false)`: this platform's package manager is unknown.
pub fn install_packages(
    platform: &Platform,
    packages: Packages<'_>,
    progress: &mut dyn Progress,
) -> Result<bool> {
    let steps: Vec<Vec<String>> = match platform {
        Platform::Debian => {
            if !is_root() {
                return Err(user_err(format!(
                    "--install-deps needs root on Debian/Ubuntu; run:\n  {}",
                    install_command(platform, false, packages).unwrap_or_default()
                )));
            }
            let mut install = vec!["apt-get".to_string(), "install".into(), "-y".into()];
            install.extend(packages.apt.iter().map(|p| p.to_string()));
            vec![vec!["apt-get".into(), "update".into()], install]
        }
        Platform::MacOs => {
            let mut v = vec!["brew".to_string(), "install".into()];
            v.extend(packages.brew.iter().map(|p| p.to_string()));
            vec![v]
        }
        Platform::Other => return Ok(false),
    };
    for step in steps {
        progress.message(&format!("running: {}", step.join(" ")));
        let status = Command::new(&step[0])
            .args(&step[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| user_err(format!("cannot run {}: {e}", step[0])))?;
        if !status.success() {
            return Err(user_err(format!("`{}` failed ({status})", step.join(" "))));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Packages<'static> = Packages {
        apt: &["cmake", "ninja-build"],
        brew: &["cmake", "ninja"],
    };

    #[test]
    fn install_commands_render_per_platform() {
        assert_eq!(
            install_command(&Platform::Debian, true, P).unwrap(),
            "apt-get update && apt-get install -y cmake ninja-build"
        );
        assert_eq!(
            install_command(&Platform::Debian, false, P).unwrap(),
            "sudo apt-get update && sudo apt-get install -y cmake ninja-build"
        );
        assert_eq!(
            install_command(&Platform::MacOs, false, P).unwrap(),
            "brew install cmake ninja"
        );
        assert_eq!(install_command(&Platform::Other, true, P), None);
    }

    #[test]
    fn debian_detection_reads_id_and_id_like() {
        assert!(is_debian_like("ID=debian\n"));
        assert!(is_debian_like("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"));
        assert!(!is_debian_like("ID=fedora\nID_LIKE=\"rhel centos\"\n"));
    }

    #[test]
    fn cmake_version_parses() {
        assert_eq!(
            parse_cmake_version("cmake version 3.25.1\n\nCMake suite"),
            Some((3, 25))
        );
        assert_eq!(parse_cmake_version("garbage"), None);
    }
}
