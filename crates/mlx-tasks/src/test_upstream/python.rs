//! test-upstream's Python: the interpreter's headers and venv module (installed with
//! `--install-deps` on Debian), and the keyed venv with the pinned numpy and pytest.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use overlay::upstream::default_cache_root;

use super::user_err;
use crate::build_mlx as bm;

/// Pinned numpy and pytest for the venv (the registry's wheels for CPython 3.11..3.13).
const PY_REQUIREMENTS: &[&str] = &["numpy==2.3.5", "pytest==8.4.2"];

/// Debian packages the Python suite needs beyond build-mlx's (headers for the extension, venv).
const APT_PYTHON: &[&str] = &["python3-dev", "python3-venv"];

fn python3() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn python_ready() -> bool {
    let probe = "import sysconfig, os, venv; \
                 assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))";
    bm::runs(&python3(), &["-c", probe])
}

pub(super) fn install_python_deps(platform: &bm::Platform) -> Result<()> {
    if python_ready() {
        return Ok(());
    }
    if *platform != bm::Platform::Debian || !bm::is_root() {
        return Err(user_err(format!(
            "{} lacks its headers (Python.h) or venv; install {} (or set PYTHON to one that has them)",
            python3(),
            APT_PYTHON.join(" ")
        )));
    }
    for step in [
        vec!["apt-get", "update"],
        [&["apt-get", "install", "-y"][..], APT_PYTHON].concat(),
    ] {
        eprintln!("running: {}", step.join(" "));
        // std, not xshell: apt-get/dpkg keep the caller's stdin (xshell's run() gives a null one).
        let ok = Command::new(step[0])
            .args(&step[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(user_err(format!("`{}` failed", step.join(" "))));
        }
    }
    Ok(())
}

/// `<cache>/venv-tests-<hash>` with the pinned numpy and pytest, keyed by the interpreter and
/// the requirements; returns its python. Made once (a marker is written last).
pub(super) fn python_venv() -> Result<PathBuf> {
    if !python_ready() {
        return Err(user_err(format!(
            "{} lacks its headers (Python.h) or venv: rerun with --install-deps, or install {}",
            python3(),
            APT_PYTHON.join(" ")
        )));
    }
    let sh = xshell::Shell::new()?;
    let out = sh
        .cmd(python3())
        .args(["-c", "import sys; print(sys.executable, sys.version)"])
        .ignore_status()
        .output()
        .context("running python3")?;
    let who = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let key = bm::short_hash(&format!("{who}\n{}", PY_REQUIREMENTS.join("\n")));
    let venv = default_cache_root().join(format!("venv-tests-{key}"));
    let py = venv.join("bin/python");
    let marker = venv.join(".xtask-ready");
    if marker.is_file() {
        return Ok(py);
    }
    eprintln!(
        "creating {} ({})",
        venv.display(),
        PY_REQUIREMENTS.join(" ")
    );
    let steps: [Vec<String>; 2] = [
        vec![
            python3(),
            "-m".into(),
            "venv".into(),
            "--clear".into(),
            venv.display().to_string(),
        ],
        [
            vec![py.display().to_string(), "-m".into(), "pip".into()],
            ["install", "--quiet", "--disable-pip-version-check"]
                .map(String::from)
                .to_vec(),
            PY_REQUIREMENTS.iter().map(|r| r.to_string()).collect(),
        ]
        .concat(),
    ];
    for step in steps {
        let out = sh
            .cmd(&step[0])
            .args(&step[1..])
            .ignore_status()
            .output()
            .with_context(|| format!("running {}", step[0]))?;
        if !out.status.success() {
            return Err(user_err(format!(
                "`{}` failed:\n{}",
                step.join(" "),
                bm::tail_lines(&String::from_utf8_lossy(&out.stderr), 20)
            )));
        }
    }
    std::fs::write(&marker, PY_REQUIREMENTS.join("\n"))?;
    Ok(py)
}
