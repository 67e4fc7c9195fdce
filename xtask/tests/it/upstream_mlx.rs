//! Integration with the real MLX history, through the URL in this workspace's pins.toml. Offline
//! machines reach it through git's `url.<mirror>.insteadOf` (see README).

use std::path::{Path, PathBuf};

use crate::fixture::{assert_same_tree, real_git, run_xtask, workspace};

const PIN: &str = "9a795735ad9a42664e08f42361b405ed570bcf1a";

fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
    real_git(dir, home, args)
}

/// A project under `t` whose series is the last `n` commits of `clone`, as git format-patch writes them.
fn project_from_commits(t: &Path, clone: &Path, n: usize) -> (PathBuf, Vec<String>) {
    let root = t.join("project");
    let overlays = root.join("overlays/mlx");
    std::fs::create_dir_all(&overlays).unwrap();
    std::fs::copy(workspace().join("pins.toml"), root.join("pins.toml")).unwrap();
    let out = git(
        clone,
        t,
        &[
            "format-patch",
            &format!("-{n}"),
            "-o",
            overlays.to_str().unwrap(),
        ],
    );
    let names: Vec<String> = out
        .lines()
        .map(|l| {
            Path::new(l)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    std::fs::write(overlays.join("series"), names.join("\n") + "\n").unwrap();
    (root, names)
}

/// Real MLX files, real overlays written by git format-patch: apply must equal `git am`.
#[test]
fn real_mlx_series_equals_git_am() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = "https://github.com/ml-explore/mlx";
    let clone = t.join("mlx");
    git(
        t,
        t,
        &["clone", "-q", "--no-checkout", url, clone.to_str().unwrap()],
    );
    git(&clone, t, &["checkout", "-q", "--detach", PIN]);
    // Two overlays touching the files the kernel work will touch.
    let q = clone.join("mlx/backend/metal/kernels/quantized.h");
    let text = std::fs::read_to_string(&q).unwrap();
    let marker = "template <typename T, int group_size, int bits>\nMETAL_FUNC void qmv_impl(";
    assert!(text.contains(marker), "the pin's quantized.h has qmv_impl");
    std::fs::write(
        &q,
        text.replacen(
            marker,
            &format!("// Streamed variants follow qmv_impl's order.\n{marker}"),
            1,
        ),
    )
    .unwrap();
    git(
        &clone,
        t,
        &[
            "commit",
            "-q",
            "-am",
            "Note qmv order\n\nWhy: test.\n\nOverlay-Kind: upstreamable",
        ],
    );
    let c = clone.join("mlx/backend/cpu/quantized.cpp");
    let text = std::fs::read_to_string(&c).unwrap();
    std::fs::write(&c, format!("{text}// trailing note\n")).unwrap();
    std::fs::write(clone.join("OVERLAY_NOTES.md"), "notes\n").unwrap();
    git(&clone, t, &["add", "-A"]);
    git(
        &clone,
        t,
        &[
            "commit",
            "-q",
            "-m",
            "Notes\n\nWhy: test.\n\nOverlay-Kind: local-only",
        ],
    );

    let (root, names) = project_from_commits(t, &clone, 2);
    let overlays = root.join("overlays/mlx");

    let dir = t.join("tree");
    let (code, _, err) = run_xtask(
        Some(&root),
        None,
        &["apply", "--dir", dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run_xtask(Some(&root), None, &["check"]);
    assert_eq!(code, 0, "{out}");

    let am = t.join("am");
    git(
        t,
        t,
        &["clone", "-q", "--no-checkout", url, am.to_str().unwrap()],
    );
    git(&am, t, &["checkout", "-q", "--detach", PIN]);
    for n in &names {
        git(&am, t, &["am", "-q", overlays.join(n).to_str().unwrap()]);
    }
    assert_same_tree(&dir, &am);
}

/// This workspace's own series is clean at the pin.
#[test]
fn workspace_series_is_clean_at_the_pin() {
    let (code, out, err) = run_xtask(None, None, &["check"]);
    assert_eq!(code, 0, "{out}\n{err}");
}

/// Real drift: a series on real MLX files, measured against 846d176. `a082cb91d` edits `qmm_nax`
/// (one line added above our hunk), so the overlay inside `qmm_nax` is context-drift, blamed there;
/// the overlay in `qmv_impl` that depends on `qdot` stays clean.
#[test]
fn real_mlx_drift_to_846d176() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let url = "https://github.com/ml-explore/mlx";
    let clone = t.join("mlx");
    git(
        t,
        t,
        &["clone", "-q", "--no-checkout", url, clone.to_str().unwrap()],
    );
    git(&clone, t, &["checkout", "-q", "--detach", PIN]);
    let edit = |path: &str, from: &str, to: &str| {
        let p = clone.join(path);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            text.matches(from).count(),
            1,
            "{from:?} must be unique in {path}"
        );
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    };
    edit(
        "mlx/backend/metal/quantized.cpp",
        "  kname.reserve(64);\n  bool aligned = N % 64 == 0;\n  bool batched = B > 1;\n  std::string type_string = get_type_string(x.dtype());\n  concatenate(\n      kname,\n      mode + (transpose ? \"_qmm_t_nax_\"",
        "  kname.reserve(96);\n  bool aligned = N % 64 == 0;\n  bool batched = B > 1;\n  std::string type_string = get_type_string(x.dtype());\n  concatenate(\n      kname,\n      mode + (transpose ? \"_qmm_t_nax_\"",
    );
    git(
        &clone,
        t,
        &[
            "commit",
            "-q",
            "-am",
            "Reserve more for nax kernel names\n\nWhy: test.\n\nOverlay-Kind: local-only",
        ],
    );
    edit(
        "mlx/backend/metal/kernels/quantized.h",
        "  constexpr int num_simdgroups = 2;\n  constexpr int results_per_simdgroup = 4;\n  constexpr int packs_per_thread = 1;\n",
        "  constexpr int num_simdgroups = 2;\n  constexpr int results_per_simdgroup = 4;\n  // One pack per lane: qmv_fast uses two.\n  constexpr int packs_per_thread = 1;\n",
    );
    git(
        &clone,
        t,
        &[
            "commit",
            "-q",
            "-am",
            "Note qmv packing\n\nWhy: test.\n\nOverlay-Kind: upstreamable\nDepends-On: mlx/backend/metal/kernels/quantized.h::qdot",
        ],
    );

    let (root, _) = project_from_commits(t, &clone, 2);

    let run = |args: &[&str]| run_xtask(Some(&root), None, args);
    let (code, out, err) = run(&["drift", "--to", PIN]);
    assert_eq!(code, 0, "drift at the pin is clean: {out}{err}");
    let (code, out, err) = run(&["drift", "--to", "846d176", "--per-commit"]);
    assert_eq!(code, 1, "{err}");
    expect_test::expect![[r#"
        drift: mlx 9a795735ad9a -> 846d176227a0 (32 first-parent commit(s) walked; 1 of them changed a file the overlays touch or depend on, and only those were checked)
          context-drift  0001-Reserve-more-for-nax-kernel-names.patch  since a082cb91d590 Use a 32-row block in qmm_t_nax when one block covers all of M (#4171)
              changed upstream: mlx/backend/metal/quantized.cpp::mlx::core::qmm_nax (encloses hunk #1 of mlx/backend/metal/quantized.cpp)
                @@ -17,7 +17,8 @@ void qmm_nax(
        
                   int wm = 2;
                   int wn = 2;
                -  int bm = 64;
                +  // Use smaller bm when one block covers all of M.
                +  int bm = (M <= 32) ? 32 : 64;
                   int bn = 64;
                   int bk = 64;
                   MTL::Size group_dims(32, wn, wm);
              mlx/backend/metal/quantized.cpp hunk #1: moved 837 -> 838 (+1)
                a082cb91d590 moved the hunk to other lines, changed mlx::core::qmm_nax (the hunk is moved after it; it has had this status since this commit): Use a 32-row block in qmm_t_nax when one block covers all of M (#4171)
          clean          0002-Note-qmv-packing.patch
        2 overlay(s): 1 clean, 1 context-drift
    "#]].assert_eq(&out);
}

/// The workspace's own series against real history: drift at 846d176 (snapshot) and an export of
/// its upstreamable overlays onto the pin and onto 846d176, each verified with `git am` by the command.
#[test]
fn workspace_series_drift_and_export_on_real_mlx() {
    let run = |args: &[&str]| run_xtask(None, None, args);
    let (code, out, err) = run(&["drift", "--to", "846d176", "--per-commit", "--json"]);
    assert!(code == 0 || code == 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let statuses: Vec<(String, String)> = v["overlays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                o["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let series = std::fs::read_to_string(workspace().join("overlays/mlx/series")).unwrap();
    let listed: Vec<&str> = series
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        statuses.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        listed
    );
    for (name, status) in &statuses {
        // 0010 hooks into scaled_dot_product_attention (its Depends-On), whose signature
        // upstream extends before 846d176 (`bool force_fused`): drift must ask for a review.
        let expected: &[&str] = if name.starts_with("0010-") {
            &["context-drift"]
        } else if name.starts_with("0013-") || name.starts_with("0014-") {
            // Both route in ScaledDotProductAttention::use_fallback, whose signature upstream
            // extends (772bc8a00, force_fused) and whose Metal rules it rewrites (3a6219917,
            // 714a7efcb): a conflict the next bump resolves, named here so it is not news.
            &["conflict"]
        } else if name.starts_with("0018-") {
            // It patches 0013's file (scaled_dot_product_attention.cu): blocked by that
            // conflict, and forecast below to apply cleanly once it is resolved.
            &["blocked"]
        } else {
            &["clean", "moved"]
        };
        assert!(
            expected.contains(&status.as_str()),
            "{name} is {status} at 846d176: {out}"
        );
    }
    // The drift report's entry of the overlay whose name starts with `prefix`.
    let overlay = |prefix: &str| {
        v["overlays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("overlay {prefix} in the series"))
    };
    let mma = overlay("0018-");
    assert!(
        mma["blocked_by"]
            .as_str()
            .is_some_and(|b| b.starts_with("0013-"))
            && mma["forecast"]["status"] == "clean",
        "{mma}"
    );
    for prefix in ["0013-", "0014-"] {
        let o = overlay(prefix);
        assert!(
            o["changed_symbols"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == "mlx::core::fast::ScaledDotProductAttention::use_fallback"),
            "{o}"
        );
    }
    let sdpa = overlay("0010-");
    assert!(
        sdpa["changed_symbols"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "mlx::core::fast::scaled_dot_product_attention"),
        "{sdpa}"
    );
    assert!(
        sdpa["symbol_changes"][0]["diff"]
            .as_str()
            .unwrap()
            .contains("force_fused"),
        "{sdpa}"
    );
    // Files only local-only overlays touch must never appear in an export.
    let files_of = |kind: &str| -> std::collections::BTreeSet<String> {
        listed
            .iter()
            .map(|n| std::fs::read_to_string(workspace().join("overlays/mlx").join(n)).unwrap())
            .filter(|t| t.contains(&format!("Overlay-Kind: {kind}")))
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.strip_prefix("diff --git a/"))
                    .map(|l| l.split(' ').next().unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let local_only_files: Vec<String> = files_of("local-only")
        .difference(&files_of("upstreamable"))
        .cloned()
        .collect();
    assert!(!local_only_files.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    for onto in [PIN, "846d176"] {
        let dir = tmp.path().join(onto);
        let (code, out, err) = run(&[
            "export-upstream",
            "--onto",
            onto,
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("verified: the series `git am`s onto"), "{out}");
        let mut exported = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            if p.extension().is_some_and(|x| x == "patch") {
                exported += 1;
                assert!(
                    !text.contains("Overlay-Kind") && !text.contains("Depends-On"),
                    "{}",
                    p.display()
                );
                for f in &local_only_files {
                    assert!(
                        !text.contains(&format!("diff --git a/{f} ")),
                        "{f} belongs to a local-only overlay: {}",
                        p.display()
                    );
                }
            }
        }
        let upstreamable = listed
            .iter()
            .filter(|n| {
                std::fs::read_to_string(workspace().join("overlays/mlx").join(n))
                    .unwrap()
                    .contains("Overlay-Kind: upstreamable")
            })
            .count();
        assert_eq!(exported, upstreamable);
        assert!(dir.join("PR.md").exists());
    }
}
