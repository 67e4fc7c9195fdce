//! Everyday maintainer workflows that must never lose, revert or strand work (issue 13): a missing
//! series, overlay names the series cannot hold, non-canonical overlays, symlinks and modes in a
//! resolved bump, unrefreshed edits before a bump, junk in the applied tree, downgrades.

use std::path::Path;

use crate::fixture::{Fixture, Out};

const T: &str = "Overlay-Kind: local-only";

/// An upstream with two files, pinned, with one overlay widening `b`.
fn fixture() -> Fixture {
    let f = Fixture::new(&[
        ("src/lib.c", "int a;\nint b;\nint c;\nint d;\nint e;\n"),
        ("README", "readme\n"),
    ]);
    f.add_overlay(
        "Make b wider",
        &[(
            "src/lib.c",
            Some("int a;\nlong b;\nint c;\nint d;\nint e;\n"),
        )],
        T,
    );
    f
}

/// Exit 2 with every `want` in stderr and a help line; the project is byte-identical afterwards.
#[track_caller]
fn refused(f: &Fixture, args: &[&str], want: &[&str]) -> Out {
    let before = f.project_snapshot();
    let out = f.xtask(args).code(2);
    for w in want {
        assert!(
            out.stderr.contains(w),
            "{args:?}: wanted {w:?} in:\n{}",
            out.stderr
        );
    }
    assert!(
        out.stderr.contains("help:"),
        "{args:?}: no advice in:\n{}",
        out.stderr
    );
    assert_eq!(before, f.project_snapshot(), "{args:?} changed the project");
    out
}

fn applied(f: &Fixture) -> std::path::PathBuf {
    f.root.join("target/apply/up")
}

/// Issue 13, item 8: a deleted series gave the plain upstream tree with exit 0.
#[test]
fn missing_series_is_an_error_not_an_empty_series() {
    let f = fixture();
    std::fs::remove_file(f.root.join("overlays/up/series")).unwrap();
    for cmd in [&["apply"][..], &["status"], &["check"], &["drift"]] {
        refused(
            &f,
            cmd,
            &["overlays/up/series: no series file (1 overlay files here would be left out)"],
        );
    }
    assert!(
        !applied(&f).exists(),
        "apply wrote a tree without the overlays"
    );
    // An empty series file is the way to say "no overlays".
    std::fs::write(f.root.join("overlays/up/series"), "").unwrap();
    f.xtask(&["apply"]).ok();
    assert_eq!(
        f.read(applied(&f).join("src/lib.c")),
        "int a;\nint b;\nint c;\nint d;\nint e;\n"
    );
}

/// Issue 13, item 6: `new-overlay` accepted names the series parser then rejected (`#`, space, tab),
/// so every later command failed. Now both use one rule: exit 2, nothing written.
#[test]
fn new_overlay_rejects_names_the_series_cannot_hold() {
    let f = fixture();
    f.xtask(&["apply"]).ok();
    std::fs::write(applied(&f).join("new.h"), "#pragma once\n").unwrap();
    let tree_before = crate::fixture::files_under(&applied(&f), &[]);
    for name in [
        "0002-fix#2",
        "0002 fix",
        "0002\tfix",
        "0002-a\u{1}b",
        "../0002-up",
        ".hidden",
    ] {
        let out = refused(
            &f,
            &[
                "new-overlay",
                name,
                "--kind",
                "local-only",
                "-m",
                "Add a header",
            ],
            &["not a valid overlay name", "nothing was written"],
        );
        assert!(
            out.stderr
                .contains(&format!("{:?}", format!("{name}.patch"))),
            "{}",
            out.stderr
        );
        assert_eq!(tree_before, crate::fixture::files_under(&applied(&f), &[]));
    }
    f.xtask(&["status"]).ok();
    // A good name still works, and the series it writes parses.
    f.xtask(&[
        "new-overlay",
        "0002-add-header",
        "--kind",
        "local-only",
        "-m",
        "Add a header",
    ])
    .ok();
    f.xtask(&["check"]).ok();
}

fn pins_rev(f: &Fixture) -> String {
    let t = f.read(f.root.join("pins.toml"));
    t.lines()
        .find_map(|l| l.strip_prefix("rev = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string()
}

/// Issue 13, item 5: `bump-pin` to an ancestor of the pin went back silently ("clean", exit 0).
/// Backwards or sideways needs --allow-downgrade and says how many commits it reverts.
#[test]
fn bump_to_an_ancestor_or_a_side_branch_needs_allow_downgrade() {
    let f = fixture();
    let old = f.pin.clone();
    f.commit_upstream(&[("README", "readme 2\n")], "two");
    let head = f.commit_upstream(&[("README", "readme 3\n")], "three");
    f.xtask(&["bump-pin", "main"]).ok();
    assert_eq!(pins_rev(&f), head);
    let out = refused(
        &f,
        &["bump-pin", &old],
        &[
            "is an ancestor of the pin",
            "reverts 2 upstream commit(s)",
            "--allow-downgrade",
        ],
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    refused(
        &f,
        &["bump-pin", &old, "--dry-run"],
        &["reverts 2 upstream commit(s)"],
    );
    // A side branch that lacks the pin's commits.
    f.git(&f.upstream, &["checkout", "-q", "-b", "side", &old]);
    let side = f.commit_upstream(&[("README", "side\n")], "side");
    f.git(&f.upstream, &["checkout", "-q", "main"]);
    refused(
        &f,
        &["bump-pin", &side],
        &[
            "is not a descendant of the pin",
            "reverts 2 upstream commit(s)",
        ],
    );
    // Unrelated history.
    f.git(&f.upstream, &["checkout", "-q", "--orphan", "other"]);
    let other = f.commit_upstream(
        &[("src/lib.c", "int a;\nint b;\nint c;\nint d;\nint e;\n")],
        "unrelated",
    );
    f.git(&f.upstream, &["checkout", "-q", "-f", "main"]);
    refused(
        &f,
        &["bump-pin", &other],
        &["shares no history with the pin"],
    );
    assert_eq!(pins_rev(&f), head);
    // Asked for, it goes back and says what it reverts.
    let out = f.xtask(&["bump-pin", &old, "--allow-downgrade"]).ok();
    assert!(
        out.stdout.contains("downgrade (--allow-downgrade): "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("reverts 2 upstream commit(s)"),
        "{}",
        out.stdout
    );
    assert_eq!(pins_rev(&f), old);
}

fn numbered(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

fn line_is(n: usize, text: &'static str) -> impl Fn(usize) -> String {
    move |i| {
        if i == n {
            format!("{text}\n")
        } else {
            format!("line {i}\n")
        }
    }
}

/// Keeps the overlay's side of every conflict in `path`.
fn keep_overlay_side(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut side = 0; // 0 outside, 1 ours (kept), 2 the rest of the conflict
    for l in text.split_inclusive('\n') {
        if l.starts_with("<<<<<<< ") {
            side = 1;
        } else if side > 0 && (l.starts_with("||||||| ") || l == "=======\n") {
            side = 2;
        } else if l.starts_with(">>>>>>> ") {
            side = 0;
        } else if side < 2 {
            out.push_str(l);
        }
    }
    assert_ne!(text, out, "no conflict in {}", path.display());
    std::fs::write(path, out).unwrap();
}

/// An upstream holding a symlink and an executable beside a file two overlays edit, and a new
/// upstream commit that changes both edited lines: two conflicts in a row.
fn linked_two_conflicts() -> Fixture {
    let f = Fixture::new(&[
        ("a.txt", &numbered(|i| format!("line {i}\n"))),
        ("b.txt", "b\n"),
    ]);
    std::os::unix::fs::symlink("a.txt", f.upstream.join("LINK.md")).unwrap();
    std::fs::write(f.upstream.join("run.sh"), "#!/bin/sh\n").unwrap();
    f.git(
        &f.upstream,
        &["update-index", "--add", "--chmod=+x", "run.sh"],
    );
    let pin = f.commit_upstream(&[], "a link and a script");
    f.write_pins(&pin);
    f.git(&f.work, &["pull", "-q", "origin", "main"]);
    let mut f = f;
    f.pin = pin;
    f.add_overlay(
        "Ten",
        &[("a.txt", Some(&numbered(line_is(10, "line TEN"))))],
        T,
    );
    let after_first = numbered(|i| match i {
        10 => "line TEN\n".into(),
        20 => "line TWENTY\n".into(),
        _ => format!("line {i}\n"),
    });
    f.add_overlay("Twenty", &[("a.txt", Some(&after_first))], T);
    let upstream_side = numbered(|i| match i {
        10 => "line 10 upstream\n".into(),
        20 => "line 20 upstream\n".into(),
        _ => format!("line {i}\n"),
    });
    f.commit_upstream(&[("a.txt", &upstream_side)], "upstream edits 10 and 20");
    f
}

/// Issue 13, item 1: `--continue` read the bump tree through its symlinks and swept an upstream
/// symlink (MLX's CLAUDE.md -> AGENTS.md) into the overlay as a regular file; with two conflicts the
/// bad resolution was saved and the second `--continue` was stuck. Now a resolution carries only the
/// overlay's own files; links and modes stay upstream's.
#[test]
fn continue_never_sweeps_links_modes_or_other_files_into_an_overlay() {
    let f = linked_two_conflicts();
    let bump = f.root.join("target/bump/up");
    f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        std::fs::symlink_metadata(bump.join("LINK.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    keep_overlay_side(&bump.join("a.txt"));
    // An edit outside the overlay's files is refused, named, and nothing is written.
    std::fs::write(bump.join("b.txt"), "b edited while resolving\n").unwrap();
    refused(
        &f,
        &["bump-pin", "main", "--continue", "--accept-reverts"],
        &["b.txt (modified)", "does not touch"],
    );
    std::fs::write(bump.join("b.txt"), "b\n").unwrap();
    // The second conflict. (Keeping the overlay's side drops upstream's line: confirmed.)
    f.xtask(&["bump-pin", "main", "--continue", "--accept-reverts"])
        .code(1);
    keep_overlay_side(&bump.join("a.txt"));
    let out = f
        .xtask(&["bump-pin", "main", "--continue", "--accept-reverts"])
        .ok();
    assert!(out.stdout.contains("pinned up at"), "{}", out.stdout);
    for o in ["0001-Ten.patch", "0002-Twenty.patch"] {
        let text = f.read(f.root.join("overlays/up").join(o));
        assert!(
            !text.contains("LINK.md") && !text.contains("run.sh"),
            "{o} swept in:\n{text}"
        );
        assert_eq!(text.matches("diff --git").count(), 1, "{o}:\n{text}");
    }
    f.xtask(&["check"]).ok();
    f.xtask(&["apply"]).ok();
    let git = f.git_am_tree_at(&pins_rev(&f));
    crate::fixture::assert_same_tree(&applied(&f), &git);
    assert!(
        std::fs::symlink_metadata(applied(&f).join("LINK.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Issue 13, item 2: edits not yet refreshed, then a bump: no warning, `status` silent, then
/// `refresh` said "apply again" and `apply` said "refresh". Now status shows the edits and bump
/// refuses, naming them and both ways out.
#[test]
fn unrefreshed_edits_block_the_bump_and_show_in_status() {
    let f = fixture();
    f.xtask(&["apply"]).ok();
    let lib = applied(&f).join("src/lib.c");
    std::fs::write(&lib, "int a;\nlong long b;\nint c;\nint d;\nint e;\n").unwrap();
    let out = f.xtask(&["status"]).ok();
    assert!(
        out.stdout.contains(
            "target/apply/up holds 1 edit(s) no overlay has (modified: src/lib.c): `cargo xtask"
        ) && out.stdout.contains("refresh` keeps them"),
        "{}",
        out.stdout
    );
    let old = f.pin.clone();
    let two = f.commit_upstream(&[("README", "readme 2\n")], "two");
    let tree = crate::fixture::files_under(&applied(&f), &[]);
    refused(
        &f,
        &["bump-pin", &two],
        &[
            "holds 1 edit(s) no overlay has (modified: src/lib.c)",
            "would strand them",
            "refresh`",
            "apply --force",
        ],
    );
    assert_eq!(pins_rev(&f), old);
    assert_eq!(
        tree,
        crate::fixture::files_under(&applied(&f), &[]),
        "the edit is kept"
    );
    // The first way out: refresh, then bump; the edit survives the bump.
    f.xtask(&["refresh"]).ok();
    assert!(!f.xtask(&["status"]).ok().stdout.contains("edit(s)"));
    f.xtask(&["bump-pin", &two]).ok();
    f.xtask(&["apply"]).ok();
    assert_eq!(
        f.read(&lib),
        "int a;\nlong long b;\nint c;\nint d;\nint e;\n"
    );
    // The second: discard with apply --force.
    std::fs::write(&lib, "edited again\n").unwrap();
    let three = f.commit_upstream(&[("README", "readme 3\n")], "three");
    f.xtask(&["bump-pin", &three]).code(2);
    f.xtask(&["apply", "--force"]).ok();
    f.xtask(&["bump-pin", &three]).ok();
    assert_eq!(pins_rev(&f), three);
}

/// An upstream whose `.gitignore` ignores `/build/` and `*.o`, though it tracks `data.o` (added
/// before the rule, as `git add -f` would), with the fixture's overlay on top.
fn with_gitignore() -> Fixture {
    let mut f = Fixture::new(&[
        ("src/lib.c", "int a;\nint b;\nint c;\nint d;\nint e;\n"),
        ("data.o", "tracked though ignored\n"),
    ]);
    f.pin = f.commit_upstream(&[(".gitignore", "/build/\n*.o\n")], "ignore build output");
    f.write_pins(&f.pin.clone());
    f.git(&f.work, &["pull", "-q", "origin", "main"]);
    f.add_overlay(
        "Make b wider",
        &[(
            "src/lib.c",
            Some("int a;\nlong b;\nint c;\nint d;\nint e;\n"),
        )],
        T,
    );
    f
}

/// Issue 13, item 4: junk in the applied tree (an in-tree `build/`, `ops.cpp~`) counted as edits:
/// it blocked refresh, `--into` swept it into an overlay, `apply --force` deleted the build folder.
/// The tree's `.gitignore` files, git's global excludes and editor leftovers are honoured now,
/// except for files apply wrote (tracked files are never ignored, as in git).
#[test]
fn ignored_junk_in_the_applied_tree_is_not_an_edit() {
    let f = with_gitignore();
    f.xtask(&["apply"]).ok();
    let t = applied(&f);
    std::fs::create_dir_all(t.join("build/sub")).unwrap();
    std::fs::write(t.join("build/sub/CMakeCache.txt"), "cache\n").unwrap();
    std::fs::write(t.join("src/lib.o"), "object\n").unwrap();
    std::fs::write(t.join("src/lib.c~"), "backup\n").unwrap();
    std::fs::write(t.join("src/.lib.c.swp"), "swap\n").unwrap();
    // Junk alone: no edits anywhere.
    assert!(!f.xtask(&["status"]).ok().stdout.contains("edit(s)"));
    let out = f.xtask(&["refresh"]).ok();
    assert!(out.stdout.contains("nothing to refresh"), "{}", out.stdout);
    // An intended edit beside the junk: refresh takes the edit and nothing else.
    std::fs::write(
        t.join("src/lib.c"),
        "int a;\nlong long b;\nint c;\nint d;\nint e;\n",
    )
    .unwrap();
    std::fs::write(t.join("src/new.c"), "int n;\n").unwrap();
    let out = f.xtask(&["status"]).ok();
    assert!(
        out.stdout
            .contains("2 edit(s) no overlay has (modified: src/lib.c, added: src/new.c)"),
        "{}",
        out.stdout
    );
    f.xtask(&["refresh", "--into", "0001-Make-b-wider.patch"])
        .ok();
    let ov = f.read(f.root.join("overlays/up/0001-Make-b-wider.patch"));
    assert!(
        ov.contains("b/src/new.c") && ov.contains("long long b;"),
        "{ov}"
    );
    for junk in ["build", "lib.o", "lib.c~", "swp"] {
        assert!(!ov.contains(junk), "{junk} swept into the overlay:\n{ov}");
    }
    f.xtask(&["check"]).ok();
    // A tracked file is never ignored, though `*.o` matches it.
    std::fs::write(t.join("data.o"), "edited\n").unwrap();
    assert!(
        f.xtask(&["status"])
            .ok()
            .stdout
            .contains("(modified: data.o)")
    );
    // apply --force discards that edit and leaves the junk alone.
    let out = f.xtask(&["apply", "--force"]).ok();
    assert!(
        out.stdout.contains("discarded 1 edit(s) (--force): data.o"),
        "{}",
        out.stdout
    );
    assert_eq!(f.read(t.join("data.o")), "tracked though ignored\n");
    assert_eq!(f.read(t.join("build/sub/CMakeCache.txt")), "cache\n");
    assert_eq!(f.read(t.join("src/lib.o")), "object\n");
    assert_eq!(f.read(t.join("src/lib.c~")), "backup\n");
}

/// Issue 13, item 7: OFFSET had no fix, and NONCANON (a patch made with `-U5`, say) said "refresh
/// rewrites it" though refresh on an unedited tree does nothing. `canonicalize` rewrites them in
/// place, verified to give the same tree, and check's report points at it.
#[test]
fn canonicalize_fixes_offsets_and_noncanonical_patches_in_place() {
    let lines = |f: &dyn Fn(usize) -> String| (1..=20).map(f).collect::<String>();
    let plain = |i: usize| format!("int v{i};\n");
    let f = Fixture::new(&[("src/lib.c", &lines(&plain))]);
    let one = lines(&|i| {
        if i == 5 {
            "long v5;\n".into()
        } else {
            plain(i)
        }
    });
    let name1 = f.add_overlay("Widen v5", &[("src/lib.c", Some(&one))], T);
    // Made with five lines of context, as another tool might.
    let dir = f.root.join("overlays/up");
    f.git(
        &f.work,
        &["format-patch", "-1", "-U5", "-o", dir.to_str().unwrap()],
    );
    let two = lines(&|i| match i {
        5 => "long v5;\n".into(),
        14 => "long v14;\n".into(),
        _ => plain(i),
    });
    let name2 = f.add_overlay("Widen v14", &[("src/lib.c", Some(&two))], T);
    let p2 = dir.join(&name2);
    let text = f.read(&p2);
    assert!(text.contains("@@ -11,7 +11,7 @@"), "{text}");
    std::fs::write(&p2, text.replace("@@ -11,7 +11,7 @@", "@@ -9,7 +9,7 @@")).unwrap();

    let out = f.xtask(&["check"]).code(1);
    assert!(
        out.stdout.contains("NONCANON") && out.stdout.contains("OFFSET"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("`cargo xtask canonicalize` rewrites those overlays in place"),
        "{}",
        out.stdout
    );

    let before = f.project_snapshot();
    let out = f.xtask(&["canonicalize", "--dry-run"]).ok();
    assert!(
        out.stdout
            .contains(&format!("would rewrite {name1}: NONCANON")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "would rewrite {name2}: OFFSET src/lib.c hunk #1 (+2)"
        )),
        "{}",
        out.stdout
    );
    assert_eq!(before, f.project_snapshot(), "a dry run writes nothing");

    // Refusals change nothing: an unknown name, an overlay that does not apply.
    refused(
        &f,
        &["canonicalize", "0009-nope.patch"],
        &["0009-nope.patch: no such overlay in the series"],
    );
    std::fs::write(&p2, f.read(&p2).replace("-int v14;", "-int v99;")).unwrap();
    refused(
        &f,
        &["canonicalize", &name1],
        &[
            &name2,
            "does not apply at the pin, so nothing was rewritten",
        ],
    );
    std::fs::write(&p2, f.read(&p2).replace("-int v99;", "-int v14;")).unwrap();

    // An applied tree with an unrefreshed edit stays refreshable across the rewrite.
    f.xtask(&["apply"]).ok();
    let lib = applied(&f).join("src/lib.c");
    let edited = f.read(&lib).replace("long v14;", "long long v14;");
    std::fs::write(&lib, &edited).unwrap();
    let out = f.xtask(&["canonicalize"]).ok();
    assert!(
        out.stdout.contains("2 overlay(s) rewritten"),
        "{}",
        out.stdout
    );
    let new1 = f.read(dir.join(&name1));
    assert!(
        new1.contains("Subject: [PATCH] Widen v5") && new1.contains("Overlay-Kind: local-only"),
        "{new1}"
    );
    f.xtask(&["check"]).ok();
    assert!(
        f.xtask(&["canonicalize"])
            .ok()
            .stdout
            .contains("nothing to rewrite")
    );
    f.xtask(&["refresh"]).ok();
    assert_eq!(f.read(&lib), edited);
    f.xtask(&["check"]).ok();
    f.xtask(&["apply"]).ok();
    crate::fixture::assert_same_tree(&applied(&f), &f.git_am_tree());
}

/// Issue 13, minor: `drift --json | head -1` panicked with exit 101 (broken pipe). A reader that
/// stops early now ends the command quietly, as it ends git.
#[test]
fn a_closed_stdout_ends_quietly() {
    let f = fixture();
    f.commit_upstream(&[("README", "readme 2\n")], "two");
    f.xtask(&["status"]).ok(); // fetch first, so the next command writes at once
    for args in [&["drift", "--json"][..], &["status", "--json"]] {
        let mut child = f
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before the first write
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.signal() == Some(libc::SIGPIPE) || out.status.code() == Some(0),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// Issue 13, minor: a failed fetch left an empty bare repository in the cache.
#[test]
fn a_failed_fetch_leaves_no_empty_cache_repository() {
    let f = fixture();
    let pins = f.read(f.root.join("pins.toml"));
    let gone = f.t().join("no-such-upstream");
    std::fs::write(
        f.root.join("pins.toml"),
        pins.replace(f.upstream.to_str().unwrap(), gone.to_str().unwrap()),
    )
    .unwrap();
    f.xtask(&["apply"]).code(2);
    let left: Vec<_> = std::fs::read_dir(f.cache.join("upstreams"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.ends_with(".git")),
        "left in the cache: {left:?}"
    );
    // The right URL still works afterwards.
    std::fs::write(f.root.join("pins.toml"), pins).unwrap();
    f.xtask(&["apply"]).ok();
}

/// Issue 13, minor: `chmod +x` in the applied tree was dropped without a word (refresh ignored it,
/// apply silently undid it). Now it is an edit: status names it, refresh refuses to drop it, apply
/// refuses to undo it without --force.
#[test]
fn a_changed_executable_bit_is_an_edit_never_dropped_silently() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    f.xtask(&["apply"]).ok();
    let lib = applied(&f).join("src/lib.c");
    let chmod =
        |mode| std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(mode)).unwrap();
    chmod(0o755);
    assert!(
        f.xtask(&["status"])
            .ok()
            .stdout
            .contains("(mode changed: src/lib.c)")
    );
    refused(
        &f,
        &["refresh"],
        &["executable bit of 1 file(s) changed (src/lib.c)", "chmod"],
    );
    let out = refused(
        &f,
        &["apply"],
        &["mode:     src/lib.c (executable bit changed)"],
    );
    assert!(out.stderr.contains("--force"), "{}", out.stderr);
    assert_eq!(
        std::fs::metadata(&lib).unwrap().permissions().mode() & 0o111,
        0o111,
        "kept"
    );
    chmod(0o644);
    assert!(
        f.xtask(&["refresh"])
            .ok()
            .stdout
            .contains("nothing to refresh")
    );
    chmod(0o755);
    let out = f.xtask(&["apply", "--force"]).ok();
    assert!(
        out.stdout
            .contains("discarded 1 edit(s) (--force): src/lib.c"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::metadata(&lib).unwrap().permissions().mode() & 0o111,
        0
    );
}

/// Issue 13, item 5: two bumps started together (to a commit and to its descendant) moved the pin
/// backwards when the older target ran last. Whatever the order, the pin ends at the newer one: the
/// later bump to the older commit refuses.
#[test]
fn racing_bumps_never_move_the_pin_backwards() {
    let f = fixture();
    let a = f.commit_upstream(&[("README", "a\n")], "a");
    let b = f.commit_upstream(&[("README", "b\n")], "b");
    for round in 0..4 {
        f.write_pins(&f.pin);
        let (first, second) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let spawn = |rev: &str| {
            f.command(&["bump-pin", rev])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (c1, c2) = (spawn(first), spawn(second));
        let codes = [
            c1.wait_with_output().unwrap(),
            c2.wait_with_output().unwrap(),
        ]
        .map(|o| o.status.code());
        assert_eq!(pins_rev(&f), b, "round {round}: codes {codes:?}");
        assert!(
            codes.iter().all(|c| matches!(c, Some(0) | Some(2))),
            "round {round}: {codes:?}"
        );
    }
}
