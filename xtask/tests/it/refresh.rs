use crate::fixture::{Fixture, assert_same_tree, files_under};

const T: &str = "Overlay-Kind: upstreamable";

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// Two overlays on one file (lines 5 and 15) and one on another file.
fn fixture() -> (Fixture, std::path::PathBuf) {
    let f = Fixture::new(&[("a.txt", &numbered(30)), ("b.txt", "b1\nb2\nb3\n")]);
    f.add_overlay(
        "First",
        &[(
            "a.txt",
            Some(&numbered(30).replace("line 5\n", "line five\n")),
        )],
        T,
    );
    let a2 = numbered(30)
        .replace("line 5\n", "line five\n")
        .replace("line 15\n", "line fifteen\nline fifteen and a half\n");
    f.add_overlay("Second", &[("a.txt", Some(&a2))], T);
    f.add_overlay(
        "Third",
        &[("b.txt", Some("b1\nB2\nb3\n"))],
        "Overlay-Kind: local-only",
    );
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    (f, dir)
}

#[test]
fn refreshing_an_unmodified_tree_changes_no_byte() {
    let (f, dir) = fixture();
    let before = f.project_snapshot();
    let out = f.xtask(&["refresh", "--dir", dir.to_str().unwrap()]).ok();
    assert!(out.stdout.contains("nothing to refresh"), "{}", out.stdout);
    assert_eq!(before, f.project_snapshot());
}

#[test]
fn edits_are_refused_by_apply_then_refreshed_into_their_owner() {
    let (f, dir) = fixture();
    let a = f
        .read(dir.join("a.txt"))
        .replace("line five\n", "line FIVE\nline five-and-a-bit\n");
    std::fs::write(dir.join("a.txt"), &a).unwrap();
    let before = f.project_snapshot();
    let out = f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).code(2);
    assert!(
        out.stderr.contains("modified: a.txt") && out.stderr.contains("refresh --dir"),
        "{}",
        out.stderr
    );
    assert_eq!(
        f.read(dir.join("a.txt")),
        a,
        "apply must not touch the edit"
    );
    assert_eq!(before, f.project_snapshot());

    let out = f.xtask(&["refresh", "--dir", dir.to_str().unwrap()]).ok();
    assert!(
        out.stdout
            .contains("a.txt:5 -> 0001-First.patch (touches its lines)"),
        "{}",
        out.stdout
    );
    // The first overlay owns the edit; the second is rewritten only because its lines moved.
    assert!(
        out.stdout.contains("rewrote 0001-First.patch")
            && out.stdout.contains("rewrote 0002-Second.patch"),
        "{}",
        out.stdout
    );
    let third = std::path::Path::new("overlays/up/0003-Third.patch");
    assert_eq!(
        before[third],
        f.project_snapshot()[third],
        "an untouched overlay keeps every byte"
    );
    let first = f.read(f.root.join("overlays/up/0001-First.patch"));
    assert!(
        first.contains("Why: a test needs it.\n\nOverlay-Kind: upstreamable\n---\n"),
        "message kept: {first}"
    );
    assert!(
        first.contains("+line FIVE\n+line five-and-a-bit\n"),
        "{first}"
    );
    f.xtask(&["check"]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    // The tree is clean again for apply, and a fresh apply reproduces it.
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    let again = f.t().join("again");
    f.xtask(&["apply", "--dir", again.to_str().unwrap()]).ok();
    assert_eq!(files_under(&dir, &[]), files_under(&again, &[]));
}

#[test]
fn an_edit_between_two_overlays_goes_to_the_later_one() {
    let (f, dir) = fixture();
    // Between "line five" (overlay 1) and nothing else: lines 6..14 are upstream; insert right after
    // the second overlay's lines instead, next to an upstream line.
    let a = f.read(dir.join("a.txt")).replace(
        "line fifteen and a half\n",
        "line fifteen and a half\nextra\n",
    );
    std::fs::write(dir.join("a.txt"), a).unwrap();
    let out = f.xtask(&["refresh", "--dir", dir.to_str().unwrap()]).ok();
    assert!(
        out.stdout.contains("-> 0002-Second.patch"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("rewrote 0001"), "{}", out.stdout);
    f.xtask(&["check"]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
}

#[test]
fn upstream_only_edits_need_into_or_a_new_overlay() {
    let (f, dir) = fixture();
    let a = f
        .read(dir.join("a.txt"))
        .replace("line 25\n", "line twenty-five\n");
    std::fs::write(dir.join("a.txt"), a).unwrap();
    std::fs::write(dir.join("c.txt"), "brand new\n").unwrap();
    let before = f.project_snapshot();
    let out = f
        .xtask(&["refresh", "--dir", dir.to_str().unwrap()])
        .code(2);
    assert!(
        out.stderr.contains("2 edit(s) touch only upstream lines")
            && out.stderr.contains("a.txt:26")
            && out.stderr.contains("c.txt (whole file)"),
        "{}",
        out.stderr
    );
    assert_eq!(before, f.project_snapshot(), "nothing changes on error");

    let out = f
        .xtask(&[
            "new-overlay",
            "0004-more",
            "--dir",
            dir.to_str().unwrap(),
            "--kind",
            "local-only",
            "-m",
            "More changes",
            "-m",
            "Because tests.",
        ])
        .ok();
    assert!(
        out.stdout.contains("created 0004-more.patch"),
        "{}",
        out.stdout
    );
    let new = f.read(f.root.join("overlays/up/0004-more.patch"));
    assert!(new.starts_with("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: Ada Overlay <ada@example.com>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\nSubject: [PATCH] More changes\n\nBecause tests.\n\nOverlay-Kind: local-only\nUpstream-Status: not-submitted\n---\n"), "{new}");
    assert!(
        f.read(f.root.join("overlays/up/series"))
            .ends_with("0004-more.patch\n")
    );
    f.xtask(&["check"]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
}

#[test]
fn into_an_existing_overlay() {
    let (f, dir) = fixture();
    let b = f.read(dir.join("b.txt")).replace("b3\n", "b3\nb4\n");
    std::fs::write(dir.join("b.txt"), b).unwrap();
    let a = f.read(dir.join("a.txt")).replace("line 1\n", "line one\n");
    std::fs::write(dir.join("a.txt"), a).unwrap();
    let out = f
        .xtask(&[
            "refresh",
            "--dir",
            dir.to_str().unwrap(),
            "--into",
            "0003-Third.patch",
        ])
        .ok();
    // Both insertions sit between upstream lines only ("b3" and the end; "line 1" at the top).
    assert!(
        out.stdout
            .contains("a.txt:1 -> 0003-Third.patch (upstream lines only: --into)"),
        "{}",
        out.stdout
    );
    f.xtask(&["check"]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    let out = f
        .xtask(&[
            "refresh",
            "--dir",
            dir.to_str().unwrap(),
            "--into",
            "nope.patch",
        ])
        .code(2);
    assert!(
        out.stderr.contains("--into nope.patch: no such overlay"),
        "{}",
        out.stderr
    );
}

#[test]
fn deleting_an_overlay_file_and_reverting_a_line() {
    let (f, dir) = fixture();
    // Undo the third overlay's only change: the overlay would become empty, which is refused.
    std::fs::write(dir.join("b.txt"), "b1\nb2\nb3\n").unwrap();
    let out = f
        .xtask(&["refresh", "--dir", dir.to_str().unwrap()])
        .code(2);
    assert!(
        out.stderr.contains("0003-Third.patch") && out.stderr.contains("would become empty"),
        "{}",
        out.stderr
    );
}

#[cfg(unix)]
#[test]
fn a_file_turned_into_a_symlink_is_refused_not_read_through() {
    let (f, dir) = fixture();
    let secret = f.t().join("secret.txt");
    std::fs::write(&secret, "b1\nSECRET\nb3\n").unwrap();
    std::fs::remove_file(dir.join("b.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("b.txt")).unwrap();
    let before = f.project_snapshot();
    let out = f
        .xtask(&["refresh", "--dir", dir.to_str().unwrap()])
        .code(2);
    assert!(
        out.stderr
            .contains("b.txt: a symbolic link where the tree had none")
            && out.stderr.contains("help:"),
        "{}",
        out.stderr
    );
    assert_eq!(before, f.project_snapshot(), "refresh wrote");
}

/// Edits in a tree applied from an earlier version of the series (a pull changed the overlays,
/// issue 24's C): refresh cannot attribute them, and apply no longer sends the user to refresh;
/// both give the same way out, and following it keeps the edit.
#[test]
fn edits_across_a_series_change_get_one_way_out_that_works() {
    let (f, dir) = fixture();
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("b.txt"), "b1\nB2\nb3 edited\n").unwrap();
    let third = f.root.join("overlays/up/0003-Third.patch");
    let text = f
        .read(&third)
        .replace("Why: a test needs it.", "Why: a test needs it (pulled).");
    std::fs::write(&third, text).unwrap();
    f.xtask(&["check"]).ok();
    let before = f.project_snapshot();
    let apply = f.xtask(&["apply", "--dir", d]).code(2);
    let refresh = f.xtask(&["refresh", "--dir", d]).code(2);
    for out in [&apply, &refresh] {
        assert!(
            out.stderr.contains("another version of the series")
                && out.stderr.contains("apply --dir $TMP/tree --force")
                && !out.stderr.contains("keep them: `cargo xtask refresh"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(before, f.project_snapshot());
    // The way out: the edit aside, a fresh tree, the edit again, refresh.
    let edited = f.read(dir.join("b.txt"));
    f.xtask(&["apply", "--dir", d, "--force"]).ok();
    std::fs::write(dir.join("b.txt"), edited).unwrap();
    let out = f
        .xtask(&["refresh", "--dir", d, "--into", "0003-Third.patch"])
        .ok();
    assert!(
        out.stdout.contains("rewrote 0003-Third.patch"),
        "{}",
        out.stdout
    );
    assert!(f.read(&third).contains("+b3 edited\n"));
}

/// The resolution audit at refresh (issue 24): an overlay based on an older upstream commit
/// (`Base:`) that the edits make delete a line upstream added after that base (REVERTS), or bring
/// back a line upstream deleted after it (DROPS), is refused with the line and the upstream commit
/// named, nothing written; `--accept-reverts` records the confirmation as a trailer, and `check`
/// agrees. An edit that loses nothing passes silently.
#[test]
fn refresh_refuses_edits_that_revert_upstream_work_until_accepted() {
    let f = Fixture::new(&[("a.c", &numbered(20))]);
    let base = f.pin.clone();
    let later = numbered(20)
        .replace("line 10\n", "line 10\nadded later\n")
        .replace("line 15\n", "");
    let pin = f.commit_upstream(&[("a.c", &later)], "upstream adds and deletes");
    f.write_pins(&pin);
    f.git(&f.work, &["pull", "-q"]);
    let trailers =
        format!("Overlay-Kind: local-only\nUpstream-Status: not-submitted\nBase: {base}");
    f.add_overlay(
        "Fork",
        &[("a.c", Some(&later.replace("line 3\n", "line three\n")))],
        &trailers,
    );
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["apply", "--dir", d]).ok();
    let refresh = |extra: &[&str]| {
        f.xtask(&[&["refresh", "--dir", d, "--into", "0001-Fork.patch"], extra].concat())
    };
    for (edit, want) in [
        (("added later\n", ""), "deletes 1 upstream line(s)"),
        (
            ("line 14\n", "line 14\nline 15\n"),
            "brings back a line deleted by upstream",
        ),
    ] {
        let original = f.read(dir.join("a.c"));
        std::fs::write(dir.join("a.c"), original.replace(edit.0, edit.1)).unwrap();
        let before = f.project_snapshot();
        let out = refresh(&[]).code(2);
        assert!(
            out.stderr.contains(want)
                && out.stderr.contains(&pin[..12])
                && out.stderr.contains("nothing was written")
                && out.stderr.contains("--accept-reverts"),
            "{}",
            out.snapshot()
        );
        assert_eq!(before, f.project_snapshot(), "a refusal writes nothing");
        std::fs::write(dir.join("a.c"), original).unwrap();
    }
    // Keeping every line passes silently.
    let a = f.read(dir.join("a.c")).replace("line 4\n", "line four\n");
    std::fs::write(dir.join("a.c"), &a).unwrap();
    refresh(&[]).ok();
    f.xtask(&["check"]).ok();
    // Accepted: the overlay records the upstream commit, and check is clean.
    std::fs::write(dir.join("a.c"), a.replace("added later\n", "")).unwrap();
    let out = refresh(&["--accept-reverts"]).ok();
    assert!(
        out.stdout.contains(&format!("Reverts-Upstream: {pin}")),
        "{}",
        out.snapshot()
    );
    let patch = f.read(f.root.join("overlays/up/0001-Fork.patch"));
    assert!(
        patch.contains(&format!("\nReverts-Upstream: {pin}\n")),
        "{patch}"
    );
    f.xtask(&["check"]).ok();
    f.xtask(&["apply", "--dir", d]).ok();
}
