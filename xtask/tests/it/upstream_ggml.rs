//! The second upstream, ggml, on its real history (issue 17): every command with `--upstream ggml`,
//! the default rule with two upstreams, and `ggml-check` with its negative controls. The mirror has
//! no commits after the pin, so drift, bump-pin and export-upstream run against a synthetic
//! continuation: real commits made here on top of the real pin (one edits `supports_op` next to
//! the accept-list hunk, one changes a `Depends-On` symbol), like MLX's real-history tests.

use std::path::{Path, PathBuf};

use crate::fixture::{assert_same_tree, real_git, run_xtask, workspace};

const PIN: &str = "d99724f2b141fed9e1a9f402213506c081433465";
const URL: &str = "https://github.com/ggml-org/ggml";
/// This branch's own overlays (the kernel overlays 0002-0004 come from another branch).
const OURS: [&str; 3] = [
    "0001-metal-supports-op-accept-lists.patch",
    "0005-metal-admit-tq1_0.patch",
    "0006-test-backend-ops-tq1_0.patch",
];

fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
    real_git(dir, home, args)
}

/// A project under `t`: this workspace's pins.toml (ggml's url replaced by `url` when given; the
/// `default` line dropped when `default` is false) and `overlays/ggml` holding `series`.
fn project(t: &Path, series: &[&str], url: Option<&str>, default: bool) -> PathBuf {
    let root = t.join("project");
    let dir = root.join("overlays/ggml");
    std::fs::create_dir_all(&dir).unwrap();
    let mut pins = std::fs::read_to_string(workspace().join("pins.toml")).unwrap();
    if let Some(u) = url {
        pins = pins.replace(&format!("url = \"{URL}\""), &format!("url = \"{u}\""));
    }
    if !default {
        pins = pins.replace("default = \"mlx\"\n", "");
    }
    std::fs::write(root.join("pins.toml"), pins).unwrap();
    for n in series {
        std::fs::copy(workspace().join("overlays/ggml").join(n), dir.join(n)).unwrap();
    }
    std::fs::write(dir.join("series"), series.join("\n") + "\n").unwrap();
    root
}

fn xtask(root: &Path, cache: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    run_xtask(Some(root), cache, args)
}

fn clone_at_pin(t: &Path, name: &str) -> PathBuf {
    let clone = t.join(name);
    git(
        t,
        t,
        &["clone", "-q", "--no-checkout", URL, clone.to_str().unwrap()],
    );
    git(&clone, t, &["checkout", "-q", "-b", "cont", PIN]);
    clone
}

/// status, apply and check on the real pin with `--upstream ggml`; apply equals `git am` of the
/// same files; MLX stays the default; without `default` and without `--upstream`, exit 2 naming both.
#[test]
fn ggml_series_applies_like_git_am_beside_mlx() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let root = project(t, &OURS, None, true);
    let (code, out, err) = xtask(&root, None, &["--upstream", "ggml", "status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("upstream ggml: {URL} @ {PIN}")),
        "{out}"
    );
    assert!(out.contains("overlays in overlays/ggml (3):"), "{out}");
    let (code, out, err) = xtask(&root, None, &["--upstream", "ggml", "check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("check: 3 overlay(s) against ggml@"),
        "{out}"
    );
    let dir = t.join("tree");
    let (code, _, err) = xtask(
        &root,
        None,
        &[
            "--upstream",
            "ggml",
            "apply",
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let am = clone_at_pin(t, "am");
    for n in OURS {
        git(
            &am,
            t,
            &[
                "am",
                "-q",
                root.join("overlays/ggml").join(n).to_str().unwrap(),
            ],
        );
    }
    assert_same_tree(&dir, &am);

    // The default: `default = "mlx"` picks MLX (whose overlay folder this project lacks).
    let (code, _, err) = xtask(&root, None, &["status"]);
    assert_eq!(code, 2);
    assert!(err.contains("upstream.mlx.overlays"), "{err}");
    let bare = t.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let root = project(&bare, &OURS, None, false);
    let (code, out, err) = xtask(&root, None, &["status"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("2 upstreams (mlx, ggml) and no `default`: which one?")
            && err.contains("pass --upstream NAME, or add `default = \"NAME\"`"),
        "{err}"
    );
    let (code, _, err) = xtask(&root, None, &["--upstream", "ggml", "check"]);
    assert_eq!(code, 0, "{err}");
}

/// ggml-check passes where the accept-lists name exactly the types with kernels (0001 alone) and
/// fails on the crash class: the plain pin (reject-lists admit TQ1_0 and other types without
/// kernels), the pin with TQ1_0 enabled in test-backend-ops, and TQ1_0 admitted without kernels.
#[test]
fn ggml_check_fails_on_the_pin_and_without_kernels() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, series: &[&str]| {
        let t = tmp.path().join(name);
        std::fs::create_dir_all(&t).unwrap();
        let root = project(&t, series, None, true);
        let (code, out, err) = xtask(&root, None, &["--json", "ggml-check"]);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
        let forms: Vec<String> = v["gates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["form"].as_str().unwrap().to_string())
            .collect();
        let tq1: Vec<(String, bool)> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["type"] == "tq1_0")
            .map(|f| {
                (
                    f["op"].as_str().unwrap().to_string(),
                    f["tested"].as_bool().unwrap(),
                )
            })
            .collect();
        (code, forms, v["findings"].as_array().unwrap().len(), tq1)
    };
    let ops = |tested: bool| -> Vec<(String, bool)> {
        ["MUL_MAT", "MUL_MAT_ID", "GET_ROWS"]
            .map(|o| (o.to_string(), tested))
            .to_vec()
    };

    let (code, forms, n, tq1) = run("pin", &[]);
    assert_eq!(
        (code, forms),
        (
            1,
            ["reject-list", "reject-list", "accept-list"]
                .map(String::from)
                .to_vec()
        )
    );
    assert!(
        n > 3,
        "the reject-lists admit more than TQ1_0 without kernels"
    );
    assert_eq!(tq1, ops(false));

    let (code, _, _, tq1) = run("tests-only", &[OURS[2]]);
    assert_eq!(code, 1);
    assert_eq!(
        tq1,
        ops(true),
        "TQ1_0 enabled in test-backend-ops: a Metal run aborts"
    );

    let (code, forms, n, _) = run("accept-lists", &[OURS[0]]);
    assert_eq!((code, forms, n), (0, vec!["accept-list".to_string(); 3], 0));

    let (code, _, n, tq1) = run("admitted-without-kernels", &[OURS[0], OURS[1]]);
    assert_eq!((code, n), (1, 3));
    assert_eq!(tq1, ops(false));
}

/// Drift, bump-pin and export-upstream on ggml's history continued here: a commit editing
/// `supports_op` two lines above the accept-list hunk (context-drift, carried by the 3-way
/// merge) and one changing `ggml_metal_library_get_pipeline_get_rows`, a `Depends-On` of 0001
/// (a review stop). After the bump the series is clean at the new pin, MLX's pin is untouched, the
/// export `git am`s onto it, and ggml-check refuses the renamed kernel format (exit 2).
#[test]
fn ggml_drift_bump_export_on_a_synthetic_continuation() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let cont = clone_at_pin(t, "cont");
    let edit = |path: &str, from: &str, to: &str, msg: &str| {
        let p = cont.join(path);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.matches(from).count(), 1, "{from:?} in {path}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
        git(&cont, t, &["commit", "-q", "-am", msg]);
        git(&cont, t, &["rev-parse", "HEAD"]).trim().to_string()
    };
    let near = edit(
        "src/ggml-metal/ggml-metal-device.m",
        "op->src[2]->ne[0] % 32 == 0;\n        case GGML_OP_SOLVE_TRI:",
        "op->src[2]->ne[0] % 64 == 0;\n        case GGML_OP_SOLVE_TRI:",
        "metal : gated delta net needs ne0 % 64",
    );
    let head = edit(
        "src/ggml-metal/ggml-metal-device.cpp",
        "\"kernel_get_rows_%s\", ggml_type_name(tsrc)",
        "\"kernel_get_rows_%s_v2\", ggml_type_name(tsrc)",
        "metal : rename get_rows kernels",
    );
    let cache = t.join("cache");
    let root = project(t, &OURS, Some(cont.to_str().unwrap()), true);
    let run = |args: &[&str]| {
        let mut a = vec!["--upstream", "ggml"];
        a.extend_from_slice(args);
        xtask(&root, Some(&cache), &a)
    };

    let (code, out, err) = run(&["drift", "--to", PIN]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(&["drift", "--to", &head, "--per-commit", "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let statuses: Vec<(&str, &str)> = v["overlays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap(), o["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        [
            (OURS[0], "context-drift"),
            (OURS[1], "context-drift"),
            (OURS[2], "clean")
        ]
    );
    let (_, human, _) = run(&["drift", "--to", &head, "--per-commit"]);
    assert!(human.contains(&format!("since {}", &near[..12])), "{human}");
    assert!(
        human.contains(
            "ggml-metal-device.cpp::ggml_metal_library_get_pipeline_get_rows (Depends-On)"
        ),
        "{human}"
    );

    let mlx_rev = |root: &Path| {
        let pins = std::fs::read_to_string(root.join("pins.toml")).unwrap();
        pins.split("[upstream.mlx]").nth(1).unwrap()[..120].to_string()
    };
    let before = mlx_rev(&root);
    let (code, out, err) = run(&["bump-pin", &head]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("review: upstream changed src/ggml-metal/ggml-metal-device.cpp::ggml_metal_library_get_pipeline_get_rows (Depends-On)"),
        "{out}"
    );
    let pins = std::fs::read_to_string(root.join("pins.toml")).unwrap();
    assert!(pins.contains(&format!("rev = \"{head}\"")), "{pins}");
    assert_eq!(mlx_rev(&root), before, "MLX's pin is not ggml's");
    let (code, out, err) = run(&["check"]);
    assert_eq!(code, 0, "{out}{err}");

    let out_dir = t.join("export");
    let (code, out, err) = run(&[
        "export-upstream",
        "--onto",
        &head,
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("verified: the series `git am`s onto"), "{out}");
    let exported = std::fs::read_dir(&out_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "patch")
        })
        .count();
    assert_eq!(exported, 3);

    let (code, _, err) = run(&["ggml-check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"kernel_get_rows_%s\" is gone"), "{err}");
}

/// This workspace's ggml series (all six overlays, kernels included) is clean at the pin and
/// passes ggml-check: every type the accept-lists admit has its kernels.
#[test]
fn workspace_ggml_series_is_clean_and_has_its_kernels() {
    let run = |args: &[&str]| {
        let (code, out, err) = run_xtask(None, None, args);
        (code, out + &err)
    };
    let (code, out) = run(&["--upstream", "ggml", "check"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&["ggml-check"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("MUL_MAT / MUL_MAT_ID (accept-list"), "{out}");
}
