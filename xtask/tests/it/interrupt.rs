//! SIGKILL at every write step of `apply`, `refresh`, `bump-pin` and `canonicalize` (the
//! fault-injection hook in `overlay::fsx`: `OVERLAY_FAULT_KILL_AFTER=N` kills the process at its
//! N-th filesystem write, a write being torn in half first). After each kill:
//! - every project file (pins.toml, series, overlays) holds either its old or its new bytes;
//! - after the next command (which recovers), the project is entirely old or entirely new;
//! - running the command again completes (or says why nothing is left to do), and the result is
//!   exactly what an uninterrupted run gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::fixture::{Fixture, assert_same_tree, files_under};

type Files = BTreeMap<PathBuf, Vec<u8>>;

/// Number of filesystem writes `args` makes from the current state (a dry count, not killed).
fn count_steps(f: &Fixture, args: &[&str]) -> usize {
    count_steps_code(f, args, 0)
}

/// Runs `args` killed at step `n`; asserts it really was killed.
fn killed_at(f: &Fixture, args: &[&str], n: usize) {
    let out = f.xtask_env(args, &[("OVERLAY_FAULT_KILL_AFTER", &n.to_string())]);
    assert_eq!(
        out.code, -1,
        "step {n} of {args:?} did not kill the process (the hook is not on that path)\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
}

fn restore(dir: &Path, files: &Files) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    for (p, bytes) in files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

/// The project folder without target/ (pins.toml, overlays, and any journal or temporaries).
fn project(f: &Fixture) -> Files {
    files_under(&f.root, &["target", ".overlay"])
}

/// A bump in progress as files: its tree and its state folder (`.overlay/`, outside `target/`).
type BumpWork = (Files, Files);

fn bump_work(f: &Fixture) -> BumpWork {
    (
        files_under(&f.root.join("target/bump/up"), &[]),
        files_under(&f.root.join(".overlay"), &[]),
    )
}

fn restore_bump(f: &Fixture, (tree, state): &BumpWork) {
    restore(&f.root.join("target/bump/up"), tree);
    restore(&f.root.join(".overlay"), state);
}

fn clear_bump(f: &Fixture) {
    for d in ["target/bump/up", ".overlay"] {
        let _ = std::fs::remove_dir_all(f.root.join(d));
    }
}

#[track_caller]
fn each_file_old_or_new(now: &Files, old: &Files, new: &Files, n: usize) {
    for (p, bytes) in now {
        let name = p.to_string_lossy();
        if name.contains(".overlay-") {
            continue; // our temporaries and journal: recovery's business, checked below
        }
        assert!(
            old.get(p) == Some(bytes) || new.get(p) == Some(bytes),
            "step {n}: {name} is neither its old nor its new content"
        );
    }
}

#[track_caller]
fn all_old_or_all_new(now: &Files, old: &Files, new: &Files, n: usize) {
    assert!(
        now == old || now == new,
        "step {n}: after recovery the project is a mix of old and new:\nnow: {:?}\nold: {:?}\nnew: {:?}",
        now.keys().collect::<Vec<_>>(),
        old.keys().collect::<Vec<_>>(),
        new.keys().collect::<Vec<_>>()
    );
}

fn numbered(n: usize, changed: &[(usize, &str)]) -> String {
    (1..=n)
        .map(|i| {
            changed
                .iter()
                .find(|(j, _)| *j == i)
                .map_or(format!("line {i}\n"), |(_, s)| format!("{s}\n"))
        })
        .collect()
}

fn two_overlays() -> Fixture {
    let f = Fixture::new(&[
        ("a.txt", &numbered(30, &[])),
        ("b.txt", "b\n"),
        ("dir/c.txt", "c\n"),
    ]);
    f.add_overlay(
        "Change line 10",
        &[("a.txt", Some(&numbered(30, &[(10, "line TEN")])))],
        "Overlay-Kind: upstreamable",
    );
    f.add_overlay(
        "Change b, add d",
        &[("b.txt", Some("B\n")), ("dir/d.txt", Some("d\n"))],
        "Overlay-Kind: local-only",
    );
    f
}

#[test]
fn apply_of_a_fresh_tree_appears_whole_or_not_at_all() {
    let f = two_overlays();
    let dir = f.t().join("tree");
    let args = ["apply", "--dir", dir.to_str().unwrap()];
    let steps = count_steps(&f, &args);
    assert!(steps >= 8, "only {steps} steps");
    let expected = f.git_am_tree();
    for n in 1..=steps {
        std::fs::remove_dir_all(&dir).unwrap();
        killed_at(&f, &args, n);
        assert!(
            !dir.exists(),
            "step {n}: a fresh tree appeared before it was complete"
        );
        f.xtask(&args).ok();
        assert_same_tree(&dir, &expected);
        f.xtask(&["status"]).ok();
    }
}

#[test]
fn apply_over_an_older_tree_is_finished_by_the_next_apply() {
    let f = two_overlays();
    let series_path = f.root.join("overlays/up/series");
    let two = f.read(&series_path);
    let one: String = two.lines().take(1).map(|l| format!("{l}\n")).collect();
    let dir = f.t().join("tree");
    let args = ["apply", "--dir", dir.to_str().unwrap()];
    let setup = |f: &Fixture| {
        std::fs::write(&series_path, &one).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        f.xtask(&args).ok();
        std::fs::write(&series_path, &two).unwrap();
    };
    setup(&f);
    let steps = count_steps(&f, &args);
    assert!(steps >= 5, "only {steps} steps");
    let expected = f.git_am_tree();
    for n in 1..=steps {
        setup(&f);
        killed_at(&f, &args, n);
        // The half-written tree is never taken for edits: apply finishes it without --force.
        let out = f.xtask(&args).ok();
        assert!(!out.stdout.contains("discarded"), "{}", out.stdout);
        assert_same_tree(&dir, &expected);
        // And refresh then sees a clean tree.
        let out = f.xtask(&["refresh", "--dir", dir.to_str().unwrap()]).ok();
        assert!(out.stdout.contains("nothing to refresh"), "{}", out.stdout);
    }
}

#[test]
fn refresh_rewrites_the_overlays_and_the_tree_state_all_or_nothing() {
    let f = two_overlays();
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["apply", "--dir", d]).ok();
    // Edits owned by both overlays: refresh rewrites both and the series stays.
    std::fs::write(dir.join("a.txt"), numbered(30, &[(10, "line TEN!")])).unwrap();
    std::fs::write(dir.join("b.txt"), "B!\n").unwrap();
    let old = project(&f);
    let tree0 = files_under(&dir, &[]);
    let args = ["refresh", "--dir", d];

    // The reference: an uninterrupted run.
    f.xtask(&args).ok();
    let new = project(&f);
    let tree_new = files_under(&dir, &[]);
    assert_ne!(old, new);

    restore(&f.root.join("overlays"), &strip(&old, "overlays"));
    restore(&dir, &tree0);
    let steps = count_steps(&f, &args);
    assert!(steps >= 6, "only {steps} steps");
    for n in 1..=steps {
        restore(&f.root.join("overlays"), &strip(&old, "overlays"));
        restore(&dir, &tree0);
        killed_at(&f, &args, n);
        each_file_old_or_new(&project(&f), &old, &new, n);
        let out = f.xtask(&["status"]).ok();
        all_old_or_all_new(&project(&f), &old, &new, n);
        if project(&f) == new {
            assert!(out.stderr.contains("recovered"), "step {n}: {}", out.stderr);
        }
        // Again: completes, and lands exactly where the uninterrupted run did.
        f.xtask(&args).ok();
        assert_eq!(project(&f), new, "step {n}");
        assert_eq!(files_under(&dir, &[]), tree_new, "step {n}");
    }
}

/// `files` below `prefix`, relative to it.
fn strip(files: &Files, prefix: &str) -> Files {
    files
        .iter()
        .filter_map(|(p, b)| Some((p.strip_prefix(prefix).ok()?.to_path_buf(), b.clone())))
        .collect()
}

#[test]
fn bump_pin_moves_pins_series_and_overlays_together() {
    let f = two_overlays();
    let new_rev = f.commit_upstream(&[("a.txt", &format!("top\n{}", numbered(30, &[])))], "grow");
    let old = project(&f);
    let args = ["bump-pin", "main"];
    f.xtask(&args).ok();
    let new = project(&f);
    assert_ne!(
        old.get(Path::new("pins.toml")),
        new.get(Path::new("pins.toml"))
    );
    restore(&f.root, &old);
    let steps = count_steps(&f, &args);
    assert!(steps >= 4, "only {steps} steps");
    for n in 1..=steps {
        restore(&f.root, &old);
        killed_at(&f, &args, n);
        each_file_old_or_new(&project(&f), &old, &new, n);
        f.xtask(&["status"]).ok();
        all_old_or_all_new(&project(&f), &old, &new, n);
        let out = f.xtask(&args).ok();
        if project(&f) != new {
            panic!("step {n}: bump-pin again did not finish: {}", out.stdout);
        }
        f.xtask(&["check"]).ok();
    }
    let dir = f.t().join("check");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree_at(&new_rev));
}

#[test]
fn bump_pin_continue_and_its_conflict_tree_survive_a_kill() {
    let f = two_overlays();
    let new_rev = f.commit_upstream(
        &[("a.txt", &numbered(30, &[(10, "line 10 upstream")]))],
        "conflicting edit",
    );
    let old = project(&f);
    let bump_dir = f.root.join("target/bump/up");

    // Conflict: the bump tree and its state are written; pins and overlays never change.
    let start = ["bump-pin", new_rev.as_str()];
    f.xtask(&start).code(1);
    clear_bump(&f);
    let steps = count_steps_code(&f, &start, 1);
    assert!(steps >= 3, "only {steps} steps");
    for n in 1..=steps {
        clear_bump(&f);
        killed_at(&f, &start, n);
        assert_eq!(
            project(&f),
            old,
            "step {n}: the conflict path wrote the project"
        );
        // The next bump-pin either resumes the bump in progress or starts over cleanly.
        let out = f.xtask(&start);
        assert!(
            out.code == 1 || out.stderr.contains("is in progress"),
            "step {n}: {}\n{}",
            out.stdout,
            out.stderr
        );
        assert_eq!(project(&f), old);
    }

    // Resolve, then kill --continue at every step.
    clear_bump(&f);
    f.xtask(&start).code(1);
    std::fs::write(
        bump_dir.join("a.txt"),
        numbered(30, &[(10, "line TEN upstream")]),
    )
    .unwrap();
    let resolved = bump_work(&f);
    let cont = ["bump-pin", new_rev.as_str(), "--continue"];
    f.xtask(&cont).ok();
    let new = project(&f);
    assert!(!bump_dir.exists());
    restore(&f.root, &old);
    restore_bump(&f, &resolved);
    let steps = count_steps(&f, &cont);
    for n in 1..=steps {
        restore(&f.root, &old);
        restore_bump(&f, &resolved);
        killed_at(&f, &cont, n);
        each_file_old_or_new(&project(&f), &old, &new, n);
        f.xtask(&["status"]).ok();
        let now = project(&f);
        all_old_or_all_new(&now, &old, &new, n);
        if now == old {
            f.xtask(&cont).ok();
        } else {
            // Done already: the pin moved; a leftover bump tree is cleared by the next bump-pin.
            let out = f.xtask(&start).ok();
            assert!(
                out.stdout.contains("nothing to do"),
                "step {n}: {}",
                out.stdout
            );
        }
        assert_eq!(project(&f), new, "step {n}");
        assert!(!f.root.join(".overlay/bump/up.json").exists(), "step {n}");
    }
}

fn count_steps_code(f: &Fixture, args: &[&str], code: i32) -> usize {
    let log = f.t().join("fault-count.log");
    let _ = std::fs::remove_file(&log);
    f.xtask_env(args, &[("OVERLAY_FAULT_COUNT", log.to_str().unwrap())])
        .code(code);
    let n = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    eprintln!("{args:?}: {n} write steps");
    n
}

#[test]
fn a_second_conflict_after_continue_keeps_the_first_resolution_through_a_kill() {
    let f = two_overlays();
    let new_rev = f.commit_upstream(
        &[
            ("a.txt", &numbered(30, &[(10, "line 10 upstream")])),
            ("b.txt", "b upstream\n"),
        ],
        "conflicts with both overlays",
    );
    let old = project(&f);
    let bump_dir = f.root.join("target/bump/up");
    let start = ["bump-pin", new_rev.as_str()];
    let cont = ["bump-pin", new_rev.as_str(), "--continue"];
    let out = f.xtask(&start).code(1);
    assert!(out.stdout.contains("CONFLICT in a.txt"), "{}", out.stdout);
    std::fs::write(
        bump_dir.join("a.txt"),
        numbered(30, &[(10, "line TEN upstream")]),
    )
    .unwrap();
    let first_resolved = bump_work(&f);

    // The reference: --continue stops at the second conflict; resolve it; --continue finishes.
    let finish = |f: &Fixture| {
        std::fs::write(bump_dir.join("b.txt"), "B upstream\n").unwrap();
        f.xtask(&cont).ok();
    };
    let out = f.xtask(&cont).code(1);
    assert!(out.stdout.contains("CONFLICT in b.txt"), "{}", out.stdout);
    finish(&f);
    let new = project(&f);

    restore(&f.root, &old);
    restore_bump(&f, &first_resolved);
    let steps = count_steps_code(&f, &cont, 1);
    for n in 1..=steps {
        restore(&f.root, &old);
        restore_bump(&f, &first_resolved);
        killed_at(&f, &cont, n);
        assert_eq!(project(&f), old, "step {n}: a conflict wrote the project");
        let out = f.xtask(&cont).code(1);
        assert!(
            out.stdout.contains("CONFLICT in b.txt"),
            "step {n}: {}",
            out.stdout
        );
        // The first resolution survived; the second conflict is whole.
        assert_eq!(
            f.read(bump_dir.join("a.txt")),
            numbered(30, &[(10, "line TEN upstream")])
        );
        assert!(f.read(bump_dir.join("b.txt")).contains("<<<<<<<"));
        finish(&f);
        assert_eq!(project(&f), new, "step {n}");
    }
}

#[test]
fn status_names_unfinished_work_and_how_to_finish_it() {
    let f = two_overlays();
    let series_path = f.root.join("overlays/up/series");
    let two = f.read(&series_path);
    std::fs::write(&series_path, two.lines().next().unwrap().to_string() + "\n").unwrap();
    f.xtask(&["apply"]).ok();
    std::fs::write(&series_path, &two).unwrap();
    // Killed after the tree's journal is written (step 1 is its temporary, 2 its rename).
    killed_at(&f, &["apply"], 3);
    let out = f.xtask(&["status"]).ok();
    assert!(
        out.stdout
            .contains("an apply into target/apply/up was interrupted")
            && out
                .stdout
                .contains("`cargo xtask --root $TMP/project apply` finishes it"),
        "{}",
        out.stdout
    );
    f.xtask(&["apply"]).ok();
    let out = f.xtask(&["status"]).ok();
    assert!(!out.stdout.contains("note:"), "{}", out.stdout);

    let new_rev = f.commit_upstream(
        &[("a.txt", &numbered(30, &[(10, "line 10 upstream")]))],
        "conflicting edit",
    );
    f.xtask(&["bump-pin", &new_rev]).code(1);
    let out = f.xtask(&["status"]).ok();
    assert!(
        out.stdout
            .contains("is in progress in target/bump/up (resolving 0001-Change-line-10.patch)")
            && out.stdout.contains("--continue"),
        "{}",
        out.stdout
    );
}

#[test]
fn canonicalize_rewrites_overlays_and_the_tree_state_all_or_nothing() {
    let f = two_overlays();
    // Both overlays off their recorded lines: canonicalize rewrites both.
    for (name, from, to) in [
        (
            "0001-Change-line-10.patch",
            "@@ -7,7 +7,7 @@",
            "@@ -5,7 +5,7 @@",
        ),
        ("0002-Change-b-add-d.patch", "@@ -1 +1 @@", "@@ -2 +2 @@"),
    ] {
        let p = f.root.join("overlays/up").join(name);
        let text = f.read(&p);
        assert!(text.contains(from), "{text}");
        std::fs::write(&p, text.replace(from, to)).unwrap();
    }
    f.xtask(&["check"]).code(1);
    f.xtask(&["apply"]).ok();
    let state_path = f.root.join("target/apply/up/.overlay-state.json");
    let state0 = std::fs::read(&state_path).unwrap();
    let old = project(&f);
    let args = ["canonicalize"];
    let out = f.xtask(&args).ok();
    assert!(
        out.stdout.contains("2 overlay(s) rewritten"),
        "{}",
        out.stdout
    );
    let new = project(&f);
    let state_new = std::fs::read(&state_path).unwrap();
    assert_ne!(state0, state_new, "the tree's state follows the new series");
    let reset = || {
        restore(&f.root.join("overlays"), &strip(&old, "overlays"));
        std::fs::write(&state_path, &state0).unwrap();
    };
    reset();
    let steps = count_steps(&f, &args);
    assert!(steps >= 4, "only {steps} steps");
    for n in 1..=steps {
        reset();
        killed_at(&f, &args, n);
        each_file_old_or_new(&project(&f), &old, &new, n);
        f.xtask(&["status"]).ok();
        all_old_or_all_new(&project(&f), &old, &new, n);
        let state = std::fs::read(&state_path).unwrap();
        assert_eq!(
            state == state_new,
            project(&f) == new,
            "step {n}: overlays and the tree's state moved apart"
        );
        f.xtask(&args).ok();
        assert_eq!(project(&f), new, "step {n}");
        assert_eq!(std::fs::read(&state_path).unwrap(), state_new, "step {n}");
        f.xtask(&["check"]).ok();
        let out = f.xtask(&["refresh"]).ok();
        assert!(
            out.stdout.contains("nothing to refresh"),
            "step {n}: {}",
            out.stdout
        );
    }
}
