//! The differential test against git on real MLX history (`cargo xtask diffgit`), within a CI
//! budget of seconds: the cases where drift or bump-pin once disagreed with git (issue 13, F1-F8)
//! and an evenly sampled range. The full range is `cargo xtask diffgit --range A..B`; measured
//! numbers are in docs/drift.md.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture::real_git;

const URL: &str = "https://github.com/ml-explore/mlx";

fn xtask(root: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(
        std::env::var_os("XTASK_UNDER_TEST").unwrap_or_else(|| env!("CARGO_BIN_EXE_xtask").into()),
    );
    if let Some(r) = root {
        cmd.arg("--root").arg(r);
    }
    let out = cmd.args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn git(dir: &Path, home: &Path, args: &[&str]) -> String {
    real_git(dir, home, args).trim().to_string()
}

/// A project pinned at `pin` whose one overlay is `git format-patch -1 c` (as diffgit.sh builds it).
fn project(t: &Path, clone: &Path, pin: &str, c: &str) -> PathBuf {
    let root = t.join(format!("p-{c}-{pin}").replace('^', "p"));
    let dir = root.join("overlays/mlx");
    std::fs::create_dir_all(&dir).unwrap();
    let pin = git(clone, t, &["rev-parse", &format!("{pin}^{{commit}}")]);
    std::fs::write(
        root.join("pins.toml"),
        format!("[upstream.mlx]\nurl = \"{URL}\"\nrev = \"{pin}\"\noverlays = \"overlays/mlx\"\n"),
    )
    .unwrap();
    let f = git(
        clone,
        t,
        &["format-patch", "-1", c, "-o", dir.to_str().unwrap()],
    );
    git(
        clone,
        t,
        &[
            "interpret-trailers",
            "--in-place",
            "--trailer",
            "Overlay-Kind: upstreamable",
            &f,
        ],
    );
    let name = Path::new(&f)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    std::fs::write(dir.join("series"), format!("{name}\n")).unwrap();
    root
}

fn clone(t: &Path) -> PathBuf {
    let c = t.join("mlx");
    git(
        t,
        t,
        &["clone", "-q", "--no-checkout", URL, c.to_str().unwrap()],
    );
    c
}

/// F1 (an insertion whose context reappears below it), F2 (post-image present, context matches
/// only inside another definition), F5 (a "conflict" whose two sides are identical), F6
/// (ambiguous context), F7 (partly upstream), F8 (post-image present, forward context changed),
/// F3 (a rename upstream already made), F4 (upstream moved the file the overlay changes):
/// bump-pin agrees with git cherry-pick and drift with bump-pin on each; drift calls each
/// control (target = the commit itself) upstreamed.
#[test]
fn the_cases_that_disagreed_with_git_now_agree() {
    let pairs = [
        "9f5f7931c:9f5f7931c",  // F1
        "4652b0086:4652b0086",  // F2
        "f754f3170:ed116d24ba", // F5
        "a8c3e9c66:aded2a75e0", // F6
        "5ec30acd5:bb6d960fb0", // F7
        "1700b39a1:447bb0f9ef", // F8
        "0bdbfdb83:0bdbfdb83",  // F3: a rename upstream already made
        "61b5ff8e2:d6d9b24801", // F4: upstream moved the file the overlay changes
        // Upstream deleted the file the overlay edits; libgit2 alone pairs it with another one.
        "b167f0df1c:634b148dd4",
        "f018e248cd:846d176227",
        // A false conflict of Myers alignment that git's histogram (and patience) merge cleanly.
        "afb9817599:846d176227",
        "7fde1b6a1e:846d176227",
    ];
    let mut args = vec!["diffgit"];
    for p in &pairs {
        args.extend(["--pair", p]);
    }
    let (code, out, err) = xtask(None, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("bump-pin agrees with git cherry-pick: 12/12")
            && out.contains("drift agrees with bump-pin:           12/12")
            && out.contains("drift says upstreamed: 12/12"),
        "{out}"
    );
}

/// `--resolutions` on real conflicts (issue 24 item 4): every file git conflicts on, resolved four
/// scripted ways, the audit's verdict against line accounting. d9bd3c26e4 and 3dc6e9b57e conflict
/// in a Python signature string both sides edited in different places: the audit once let the
/// overlay's whole string stand (both "replaced the same word", the literal), dropping upstream's
/// `StreamOrDevice` in it; words inside literals count now. The audit also once let the overlay's
/// side stand where "both sides replaced the same words" was not so: upstream split the line the
/// overlay rewrote (d04e5dbff8: `bool has_nax_kernel =`; 3973edd3ff: a new `int n_step) {`
/// parameter line), the words both removed in one place excused upstream's words missing in
/// another (7ab9dd9745), the overlay's "version" of the line was another line of the base kept
/// as it was (520cea2bec), an extension put back what upstream removed (933a4a77aa), and a line
/// upstream deleted beside one it changed counted as changed, not deleted (046217bcae), and a
/// `both` resolution kept the old version of a line upstream changed beside its new one
/// (2542e08b97's `return mx::int32;`, 61a4867be6, 3a6219917e) unflagged. Taking
/// the overlay's side loses upstream's lines in all of these, taking upstream's side or
/// upstream's plus the redo loses none; keeping both sides is judged alike by both.
#[test]
fn scripted_resolutions_of_real_conflicts_agree_with_line_accounting() {
    let pairs = [
        "d9bd3c26e4:846d176227",
        "3dc6e9b57e:846d176227",
        "383fe160c7:846d176227",
        "8056817bd1:846d176227",
        "074a6bfefa:846d176227",
        "d04e5dbff8:846d176227",
        "3973edd3ff:846d176227",
        "7ab9dd9745:846d176227",
        "520cea2bec:846d176227",
        "933a4a77aa:846d176227",
        "046217bcae:846d176227",
        "2542e08b97:846d176227",
        "61a4867be6:846d176227",
        "3a6219917e:846d176227",
    ];
    let mut args = vec!["diffgit", "--resolutions"];
    for p in &pairs {
        args.extend(["--pair", p]);
    }
    let (code, out, err) = xtask(None, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("resolutions: 14 conflicting pair(s), 28 file(s) resolved four ways")
            && out.contains(
                "take-upstream  audit refuses 0/28, line accounting loses 0/28, agree 28/28"
            )
            && out.contains(
                "take-overlay   audit refuses 28/28, line accounting loses 28/28, agree 28/28"
            )
            && out.contains(
                "both           audit refuses 10/28, line accounting loses 10/28, agree 28/28"
            )
            && out.contains(
                "upstream+redo  audit refuses 0/28, line accounting loses 0/28, agree 28/28"
            ),
        "{out}"
    );
}

/// An evenly spaced sample of real first-parent commits, each carried to the end of the range.
#[test]
fn a_sampled_range_of_real_commits_agrees_with_git() {
    let (code, out, err) = xtask(
        None,
        &["diffgit", "--range", "548dd80e8..846d176", "--sample", "40"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("40 (overlay, target) pair(s) compared"),
        "{out}"
    );
}

/// F7: upstream already has the function the overlay adds. git cherry-pick (and a plain merge)
/// add a second definition; bump-pin stops for review instead of moving the pin.
#[test]
fn a_partly_upstreamed_overlay_stops_the_bump_for_review() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let clone = clone(t);
    let root = project(t, &clone, "5ec30acd5^", "5ec30acd5");
    let pins = std::fs::read_to_string(root.join("pins.toml")).unwrap();
    let (code, out, err) = xtask(Some(&root), &["drift", "--to", "bb6d960fb0"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("review"), "{out}");
    let (code, out, err) = xtask(Some(&root), &["bump-pin", "bb6d960fb0"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("STOPPED for review") && out.contains("already upstream"),
        "{out}"
    );
    assert_eq!(
        pins,
        std::fs::read_to_string(root.join("pins.toml")).unwrap()
    );
}

/// F6: the overlay's context matches in two functions at the target. `git apply` patches the
/// first one (the wrong one); apply refuses to guess, and bump-pin's 3-way merge (which knows
/// where it was written) gives git cherry-pick's tree (checked by the diffgit pair above).
#[test]
fn ambiguous_context_is_refused_where_git_apply_guesses() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let clone = clone(t);
    let root = project(t, &clone, "aded2a75e0", "a8c3e9c66");
    let (code, out, err) = xtask(
        Some(&root),
        &["apply", "--dir", t.join("out").to_str().unwrap()],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("several lines") && err.contains("refusing to guess"),
        "{err}"
    );
    assert!(!t.join("out").exists(), "nothing written");
    git(&clone, t, &["checkout", "-q", "--detach", "aded2a75e0"]);
    let patch = std::fs::read_dir(root.join("overlays/mlx"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "patch"))
        .unwrap();
    git(&clone, t, &["apply", "--check", patch.to_str().unwrap()]);
}

/// An ambiguous abbreviation (two real MLX commits start with 0070e) lists the candidates once,
/// without libgit2's class and code.
#[test]
fn an_ambiguous_rev_lists_its_candidates() {
    let (code, out, err) = xtask(None, &["drift", "--to", "0070e"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("\"0070e\" is ambiguous")
            && err.contains("0070e1db4075")
            && err.contains("0070e360a142")
            && !err.contains("class="),
        "{err}"
    );
}

/// F4: upstream moved ring_impl.h (lib/jaccl/ -> jaccl/) after the pin; the overlay changes it.
/// bump-pin follows the rename as git does: the carried overlay patches the new path, and the
/// project is clean at the new pin.
#[test]
fn bump_follows_an_upstream_rename() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let clone = clone(t);
    let root = project(t, &clone, "61b5ff8e2^", "61b5ff8e2");
    // The fixture's pin is a descendant of the target: the downgrade is asked for explicitly.
    let (code, out, err) = xtask(
        Some(&root),
        &["bump-pin", "d6d9b24801", "--allow-downgrade"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let dir = root.join("overlays/mlx");
    let patch = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "patch"))
        .unwrap();
    let text = std::fs::read_to_string(patch).unwrap();
    assert!(
        text.contains(
            "diff --git a/mlx/distributed/jaccl/ring_impl.h b/mlx/distributed/jaccl/ring_impl.h"
        ),
        "{text}"
    );
    let (code, out, err) = xtask(Some(&root), &["check"]);
    assert_eq!(code, 0, "{out}{err}");
}
