//! `build-info.json`: what mlx-sys's build script links, read out of the installed
//! `MLXTargets.cmake` (CMake already resolved BLAS/LAPACK/frameworks there), written only when its
//! content changes.

use std::path::{Path, PathBuf};

use build_pipeline::install::write_if_changed;
use build_pipeline::{Context, Keys, Result};

use crate::BuildInfo;
use crate::key::Stamp;

pub(crate) fn static_lib_file(name: &str) -> String {
    if cfg!(windows) {
        format!("{name}.lib")
    } else {
        format!("lib{name}.a")
    }
}

/// GNUInstallDirs picks `lib` or `lib64` depending on the distribution.
pub(crate) fn find_lib_dir(install: &Path) -> Option<PathBuf> {
    ["lib", "lib64"]
        .iter()
        .map(|d| install.join(d))
        .find(|d| d.join(static_lib_file("mlx")).is_file())
}

/// Writes build-info.json only when its content changes: mlx-sys reruns its build script on
/// the file's mtime, so a no-op build-mlx must not touch it.
pub(crate) fn write_build_info(workspace_target: &Path, info: &BuildInfo) -> Result<PathBuf> {
    let path = workspace_target.join("mlx").join("build-info.json");
    let mut bytes = serde_json::to_vec_pretty(info)?;
    bytes.push(b'\n');
    write_if_changed(&path, &bytes)?;
    Ok(path)
}

/// The build info of the install at `install` (its libraries in `lib_dir`).
pub(crate) fn build_info(
    stamp: &Stamp,
    keys: &Keys,
    install: &Path,
    lib_dir: &Path,
) -> Result<BuildInfo> {
    let targets = install.join("share/cmake/MLX/MLXTargets.cmake");
    let text = std::fs::read_to_string(&targets)
        .with_context(|| format!("reading {} (written by cmake --install)", targets.display()))?;
    let (link_items, defines) = parse_mlx_targets(&text);
    let mut libs = vec!["static=mlx".to_string()];
    let mut link_search = vec![lib_dir.to_path_buf()];
    for item in &link_items {
        let (lib, dir) = link_lib_for(item);
        if let Some(dir) = dir
            && !link_search.contains(&dir)
        {
            link_search.push(dir);
        }
        if let Some(lib) = lib
            && !libs.contains(&lib)
        {
            libs.push(lib);
        }
    }
    Ok(BuildInfo {
        key: keys.key.clone(),
        dir_key: keys.dir_key.clone(),
        upstream: stamp.dir.upstream.clone(),
        pin: stamp.dir.pin.clone(),
        series_hash: stamp.series_hash.clone(),
        backend: stamp.dir.backend,
        profile: stamp.dir.profile,
        include_dir: install.join("include"),
        lib_dir: lib_dir.to_path_buf(),
        libs,
        link_search,
        defines,
        cxx_std: "c++20".into(),
    })
}

/// Pulls the `mlx` target's interface link items and compile definitions out of the
/// installed `MLXTargets.cmake`: CMake already resolved BLAS/LAPACK/frameworks there, so
/// build.rs links exactly what MLX's own CMake consumers would.
fn parse_mlx_targets(text: &str) -> (Vec<String>, Vec<String>) {
    let mut in_mlx = false;
    let mut links = Vec::new();
    let mut defines = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("set_target_properties(") {
            in_mlx = t.contains("mlx PROPERTIES") || t.ends_with("mlx PROPERTIES");
            continue;
        }
        if !in_mlx {
            continue;
        }
        if t == ")" {
            in_mlx = false;
            continue;
        }
        let value = |prefix: &str| -> Option<Vec<String>> {
            let rest = t.strip_prefix(prefix)?.trim();
            let rest = rest.strip_prefix('"')?.strip_suffix('"')?;
            Some(split_cmake_list(rest))
        };
        if let Some(v) = value("INTERFACE_LINK_LIBRARIES") {
            links = v;
        } else if let Some(v) = value("INTERFACE_COMPILE_DEFINITIONS") {
            defines = v;
        }
    }
    (links, defines)
}

/// Splits a CMake list, keeping `;` inside generator expressions, and strips `$<LINK_ONLY:..>`.
fn split_cmake_list(s: &str) -> Vec<String> {
    let s = s.replace("\\$", "$");
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '<' if cur.ends_with('$') => {
                depth += 1;
                cur.push(c);
            }
            '>' if depth > 0 => {
                depth -= 1;
                cur.push(c);
            }
            ';' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .filter(|x| !x.is_empty())
        .filter_map(|x| {
            if let Some(inner) = x
                .strip_prefix("$<LINK_ONLY:")
                .and_then(|r| r.strip_suffix('>'))
            {
                // LINK_ONLY may wrap another expression, e.g. $<BUILD_INTERFACE:fmt::..>.
                (!inner.is_empty() && !inner.starts_with("$<")).then(|| inner.to_string())
            } else if x.starts_with("$<") {
                None // BUILD_INTERFACE and friends do not apply to an installed library
            } else {
                Some(x)
            }
        })
        .collect()
}

/// Translates one CMake link item into a cargo `rustc-link-lib` value and search dir.
fn link_lib_for(item: &str) -> (Option<String>, Option<PathBuf>) {
    let p = Path::new(item);
    if let Some(name) = item.strip_prefix("-l") {
        return (Some(format!("dylib={name}")), None);
    }
    if item.starts_with('-') {
        return (None, None); // linker flags such as -fsanitize: not expressible as a lib
    }
    if let Some(name) = item.strip_prefix("CUDA::") {
        return (Some(format!("dylib={name}")), None);
    }
    if item == "Threads::Threads" {
        return (Some("dylib=pthread".into()), None);
    }
    if p.is_absolute() {
        let dir = p.parent().map(Path::to_path_buf);
        let file = p
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(fw) = file.strip_suffix(".framework") {
            return (Some(format!("framework={fw}")), None);
        }
        if let Some(stem) = file.strip_suffix(".tbd") {
            return (
                Some(format!("dylib={}", stem.trim_start_matches("lib"))),
                dir,
            );
        }
        let base = file.strip_prefix("lib").unwrap_or(&file);
        for (ext, kind) in [
            (".a", "static"),
            (".so", "dylib"),
            (".dylib", "dylib"),
            (".lib", "dylib"),
        ] {
            if let Some(idx) = base.find(ext)
                && (base.len() == idx + ext.len() || base[idx + ext.len()..].starts_with('.'))
            {
                return (Some(format!("{kind}={}", &base[..idx])), dir);
            }
        }
        return (None, None);
    }
    if item.contains("::") {
        return (None, None); // an imported target we cannot resolve outside CMake
    }
    (Some(format!("dylib={item}")), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, Profile};
    use std::time::Duration;

    #[test]
    fn mlx_targets_parse_into_cargo_link_lines() {
        let text = r#"
add_library(mlx STATIC IMPORTED)

set_target_properties(mlx PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "MLX_STATIC"
  INTERFACE_COMPILE_FEATURES "cxx_std_20"
  INTERFACE_INCLUDE_DIRECTORIES "${_IMPORT_PREFIX}/include"
  INTERFACE_LINK_LIBRARIES "\$<LINK_ONLY:dl>;\$<LINK_ONLY:pthread>;\$<LINK_ONLY:/usr/lib/x86_64-linux-gnu/libopenblas.so>;\$<LINK_ONLY:-lm>;\$<LINK_ONLY:-ldl>;\$<LINK_ONLY:\$<BUILD_INTERFACE:fmt::fmt-header-only>>;\$<LINK_ONLY:>"
)
"#;
        let (links, defines) = parse_mlx_targets(text);
        assert_eq!(defines, vec!["MLX_STATIC"]);
        let libs: Vec<_> = links.iter().map(|l| link_lib_for(l)).collect();
        assert_eq!(
            libs,
            vec![
                (Some("dylib=dl".into()), None),
                (Some("dylib=pthread".into()), None),
                (
                    Some("dylib=openblas".into()),
                    Some(PathBuf::from("/usr/lib/x86_64-linux-gnu"))
                ),
                (Some("dylib=m".into()), None),
                (Some("dylib=dl".into()), None),
            ]
        );
    }

    #[test]
    fn link_items_map_frameworks_static_and_versioned_libs() {
        assert_eq!(
            link_lib_for("/System/Library/Frameworks/Metal.framework")
                .0
                .as_deref(),
            Some("framework=Metal")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.a").0.as_deref(),
            Some("static=foo")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.so.3").0.as_deref(),
            Some("dylib=foo")
        );
        assert_eq!(
            link_lib_for("/opt/x/libfoo.dylib").0.as_deref(),
            Some("dylib=foo")
        );
        assert_eq!(
            link_lib_for("CUDA::cublas").0.as_deref(),
            Some("dylib=cublas")
        );
        assert_eq!(link_lib_for("Some::Target").0, None);
    }

    #[test]
    fn build_info_is_written_only_when_content_changes() {
        let dir = tempfile::tempdir().unwrap();
        let info = BuildInfo {
            key: "k".into(),
            dir_key: "d".into(),
            upstream: "mlx".into(),
            pin: "p".into(),
            series_hash: "s".into(),
            backend: Backend::Cpu,
            profile: Profile::Release,
            include_dir: "/i".into(),
            lib_dir: "/l".into(),
            libs: vec!["static=mlx".into()],
            link_search: vec![],
            defines: vec!["MLX_STATIC".into()],
            cxx_std: "c++20".into(),
        };
        let p = write_build_info(dir.path(), &info).unwrap();
        let m1 = std::fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        write_build_info(dir.path(), &info).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), m1);
        let back: BuildInfo = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(back, info);
        let changed = BuildInfo {
            key: "k2".into(),
            ..info
        };
        write_build_info(dir.path(), &changed).unwrap();
        let back: BuildInfo = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(back.key, "k2");
    }
}
