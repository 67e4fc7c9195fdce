//! bump-pin: success, dry run, conflict then --continue, upstreamed overlays, abort.

use crate::fixture::{Fixture, assert_same_tree};

fn lines(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

fn plain(i: usize) -> String {
    format!("line {i}\n")
}

fn fixture() -> Fixture {
    let f = Fixture::new(&[("a.txt", &lines(plain)), ("b.txt", "b\n")]);
    f.add_overlay(
        "Change line 10",
        &[(
            "a.txt",
            Some(&lines(|i| {
                if i == 10 {
                    "line TEN\n".into()
                } else {
                    plain(i)
                }
            })),
        )],
        "Overlay-Kind: upstreamable",
    );
    f.add_overlay(
        "Change b",
        &[("b.txt", Some("B\n"))],
        "Overlay-Kind: local-only",
    );
    f
}

fn pins_rev(f: &Fixture) -> String {
    let t = f.read(f.root.join("pins.toml"));
    t.lines()
        .find_map(|l| l.strip_prefix("rev = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string()
}

#[test]
fn a_clean_bump_rewrites_moved_overlays_and_the_pin() {
    let f = fixture();
    let new = f.commit_upstream(&[("a.txt", &format!("new top\n{}", lines(plain)))], "grow");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "main", "--dry-run"]).ok();
    assert!(
        out.stdout.contains("(dry run)") && out.stdout.contains("rewritten"),
        "{}",
        out.stdout
    );
    assert_eq!(before, f.project_snapshot(), "a dry run writes nothing");

    let out = f.xtask(&["bump-pin", "main"]).ok();
    assert!(
        out.stdout
            .contains("moved         0001-Change-line-10.patch: rewritten"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("clean         0002-Change-b.patch: kept"),
        "{}",
        out.stdout
    );
    assert_eq!(pins_rev(&f), new);
    let p2 = std::path::Path::new("overlays/up/0002-Change-b.patch");
    assert_eq!(
        before[p2],
        f.project_snapshot()[p2],
        "an unchanged overlay keeps its bytes"
    );
    let first = f.read(f.root.join("overlays/up/0001-Change-line-10.patch"));
    assert!(
        first.contains("@@ -8,7 +8,7 @@") && first.contains("Overlay-Kind: upstreamable"),
        "{first}"
    );
    f.xtask(&["check"]).ok();
    // The carried series is exactly what git am gives at the new pin.
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree_at(&new));
    // Bumping to where we are is a no-op.
    let out = f.xtask(&["bump-pin", "main"]).ok();
    assert!(out.stdout.contains("nothing to do"), "{}", out.stdout);
}

#[test]
fn a_conflict_writes_nothing_then_continue_finishes() {
    let f = fixture();
    let new = f.commit_upstream(
        &[(
            "a.txt",
            &lines(|i| {
                if i == 10 {
                    "line 10 upstream\n".into()
                } else {
                    plain(i)
                }
            }),
        )],
        "conflicting edit",
    );
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", &new]).code(1);
    assert!(
        out.stdout.contains("CONFLICT in a.txt") && out.stdout.contains("--continue"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("0002-Change-b.patch: not reached"),
        "{}",
        out.stdout
    );
    assert_eq!(
        before,
        f.project_snapshot(),
        "pins.toml and overlays/ untouched"
    );
    let tree = f.root.join("target/bump/up");
    let conflicted = f.read(tree.join("a.txt"));
    assert!(
        conflicted.contains("<<<<<<< overlay 0001-Change-line-10 at ")
            && conflicted.contains(">>>>>>> new upstream "),
        "{conflicted}"
    );

    let out = f.xtask(&["bump-pin", &new, "--continue"]).code(2);
    assert!(
        out.stderr.contains("conflict markers remain in") && out.stderr.contains("a.txt:10"),
        "{}",
        out.stderr
    );
    let out = f.xtask(&["bump-pin", &new]).code(2);
    assert!(out.stderr.contains("is in progress"), "{}", out.stderr);

    std::fs::write(
        tree.join("a.txt"),
        lines(|i| {
            if i == 10 {
                "line TEN upstream\n".into()
            } else {
                plain(i)
            }
        }),
    )
    .unwrap();
    let out = f.xtask(&["bump-pin", &new, "--continue"]).ok();
    assert!(
        out.stdout
            .contains("0001-Change-line-10.patch: resolved by hand"),
        "{}",
        out.stdout
    );
    assert_eq!(pins_rev(&f), new);
    assert!(
        !tree.exists(),
        "the bump tree is removed once the bump is done"
    );
    let first = f.read(f.root.join("overlays/up/0001-Change-line-10.patch"));
    assert!(
        first.contains("-line 10 upstream\n+line TEN upstream\n"),
        "{first}"
    );
    f.xtask(&["check"]).ok();
}

#[test]
fn abort_discards_the_bump() {
    let f = fixture();
    let new = f.commit_upstream(
        &[(
            "a.txt",
            &lines(|i| {
                if i == 10 {
                    "line 10 upstream\n".into()
                } else {
                    plain(i)
                }
            }),
        )],
        "conflicting edit",
    );
    f.xtask(&["bump-pin", &new]).code(1);
    f.xtask(&["bump-pin", &new, "--abort"]).ok();
    assert!(!f.root.join("target/bump/up").exists());
    f.xtask(&["bump-pin", &new, "--abort"]).code(2);
}

#[test]
fn upstreamed_overlays_are_dropped_only_when_asked() {
    let f = fixture();
    let new = f.commit_upstream(&[("b.txt", "B\n")], "adopt the b change");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", &new]).code(1);
    assert!(
        out.stdout
            .contains("0002-Change-b.patch: upstreamed: pass --drop-upstreamed"),
        "{}",
        out.stdout
    );
    assert_eq!(before, f.project_snapshot());
    let out = f.xtask(&["bump-pin", &new, "--drop-upstreamed"]).ok();
    assert!(
        out.stdout.contains("0002-Change-b.patch: dropped"),
        "{}",
        out.stdout
    );
    assert!(!f.root.join("overlays/up/0002-Change-b.patch").exists());
    assert!(!f.read(f.root.join("overlays/up/series")).contains("0002"));
    assert_eq!(pins_rev(&f), new);
    f.xtask(&["check"]).ok();
}

#[test]
fn pins_toml_keeps_its_formatting() {
    let f = fixture();
    let p = f.root.join("pins.toml");
    let text = format!("# our pins\n{}", f.read(&p).replace("rev = ", "rev   =   "));
    std::fs::write(&p, &text).unwrap();
    let new = f.commit_upstream(&[("README", "x\n")], "unrelated");
    f.xtask(&["bump-pin", &new]).ok();
    assert_eq!(f.read(&p), text.replace(&f.pin, &new));
}

/// `src/b.c`'s thirty one-line functions, with `f` applied to each number's line.
fn b_c(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

fn b_line(i: usize) -> String {
    format!("int b{i}(void) {{ return {i}; }}\n")
}

/// An upstream whose `src/b.c` an overlay changes (line 15), then moves to `src/core_b.c` (a
/// new file name), with `moved`'s content there.
fn renamed_upstream(moved: &str) -> (Fixture, String) {
    let f = Fixture::new(&[("src/b.c", &b_c(b_line)), ("README", "r\n")]);
    f.add_overlay(
        "b15 returns 150",
        &[(
            "src/b.c",
            Some(&b_c(|i| match i {
                15 => "int b15(void) { return 150; } // fork\n".into(),
                _ => b_line(i),
            })),
        )],
        "Overlay-Kind: upstreamable",
    );
    f.git(&f.upstream, &["mv", "src/b.c", "src/core_b.c"]);
    let new = f.commit_upstream(&[("src/core_b.c", moved)], "move b.c to core_b.c");
    (f, new)
}

/// The tree `git am` of the series onto the pin, then `git rebase` onto `new`, gives.
fn git_rebase_tree(f: &Fixture, new: &str) -> std::path::PathBuf {
    let dir = f.git_am_tree();
    f.git(&dir, &["rebase", "-q", "--onto", new, &f.pin]);
    dir
}

#[test]
fn a_rename_that_changes_the_file_name_is_followed_as_git_rebase_does() {
    // repro turn3/H: git pairs src/b.c with src/core_b.c (similar enough); bump-pin called the
    // overlay's file deleted upstream and took only a resurrected src/b.c as a resolution.
    let moved = b_c(|i| match i {
        1 => "int b1(void) { return 1; } /* first */\n".into(),
        _ => b_line(i),
    });
    let (f, new) = renamed_upstream(&moved);
    let names = f.git(&f.upstream, &["diff", "-M", "--name-status", &f.pin, &new]);
    assert!(
        names.starts_with('R') && names.ends_with("src/b.c\tsrc/core_b.c"),
        "{names}"
    );
    let rebased = git_rebase_tree(&f, &new);
    let v: serde_json::Value =
        serde_json::from_str(&f.xtask(&["drift", "--json"]).code(1).stdout).unwrap();
    assert_eq!(v["overlays"][0]["status"], "context-drift", "{v}");
    let out = f.xtask(&["bump-pin", "main"]).ok();
    assert!(out.stdout.contains("rewritten"), "{}", out.stdout);
    let patch = f.read(f.root.join("overlays/up/0001-b15-returns-150.patch"));
    assert!(
        patch.contains("diff --git a/src/core_b.c b/src/core_b.c") && !patch.contains("src/b.c"),
        "{patch}"
    );
    f.xtask(&["apply"]).ok();
    assert_same_tree(&f.root.join("target/apply/up"), &rebased);
    f.xtask(&["check"]).ok();
}

#[test]
fn a_conflict_in_a_renamed_file_is_resolved_in_the_file_upstream_moved_it_to() {
    let moved = b_c(|i| match i {
        15 => "int b15(void) { return -15; }\n".into(),
        _ => b_line(i),
    });
    let (f, _) = renamed_upstream(&moved);
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        out.stdout
            .contains("CONFLICT in src/core_b.c (upstream moved src/b.c there)"),
        "{}",
        out.stdout
    );
    let at = f.root.join("target/bump/up/src/core_b.c");
    assert!(f.read(&at).contains("<<<<<<<"), "{}", f.read(&at));
    assert!(!f.root.join("target/bump/up/src/b.c").exists());
    // The natural resolution: the overlay's change, made in the file where upstream has it now.
    let resolved = b_c(|i| match i {
        15 => "int b15(void) { return -150; } // fork\n".into(),
        _ => b_line(i),
    });
    std::fs::write(&at, &resolved).unwrap();
    f.xtask(&["bump-pin", "--continue"]).ok();
    let patch = f.read(f.root.join("overlays/up/0001-b15-returns-150.patch"));
    assert!(
        patch.contains("+int b15(void) { return -150; } // fork") && !patch.contains("src/b.c"),
        "{patch}"
    );
    f.xtask(&["apply"]).ok();
    assert_eq!(
        f.read(f.root.join("target/apply/up/src/core_b.c")),
        resolved
    );
    assert!(!f.root.join("target/apply/up/src/b.c").exists());
}
