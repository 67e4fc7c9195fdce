//! Snapshots of the human and JSON reports, and of every bad-input error (exit 2, nothing changed).

use expect_test::expect;

use crate::fixture::{Fixture, Out};

fn fixture() -> Fixture {
    // `a` is a macro: a Depends-On names a definition `check` can find (a plain variable is not one).
    let f = Fixture::new(&[("src/lib.c", "#define a 1\nint b;\nint c;\nint d;\n")]);
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("#define a 1\nlong b;\nint c;\nint d;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: submitted https://example.com/pr/1\nDepends-On: src/lib.c::a",
    );
    f
}

#[test]
fn status_human_and_json() {
    let f = fixture();
    let out = f.xtask(&["status"]);
    expect![[r#"
        exit 0
        --- stdout
        upstream up: $TMP/upstream @ $PIN
          follows branch main
        overlays in overlays/up (1):
           1. 0001-Make-b-wider.patch  [upstreamable, submitted https://example.com/pr/1]
              Make b wider
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    let out = f.xtask(&["status", "--json"]);
    expect![[r#"
        exit 0
        --- stdout
        {
          "schema": 1,
          "overlays": [
            {
              "depends_on": [
                {
                  "path": "src/lib.c",
                  "symbol": "a"
                }
              ],
              "files": [
                "src/lib.c"
              ],
              "kind": "upstreamable",
              "name": "0001-Make-b-wider.patch",
              "subject": "Make b wider",
              "upstream_status": "submitted https://example.com/pr/1"
            }
          ],
          "pending": [],
          "upstream": {
            "branch": "main",
            "fetchcontent": {},
            "name": "up",
            "overlays": "overlays/up",
            "rev": "$PIN",
            "sources": [],
            "url": "$TMP/upstream"
          }
        }
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
}

#[test]
fn check_reports_non_canonical_and_unlisted_overlays() {
    let f = fixture();
    f.xtask(&["check"]).ok();
    // A hunk with one line of context (format-patch -U1) is not what git writes by default.
    let p = f.root.join("overlays/up/0001-Make-b-wider.patch");
    let narrow = f.git(&f.work, &["format-patch", "-1", "-U1", "--stdout"]);
    std::fs::write(&p, format!("{narrow}\n")).unwrap();
    let out = f.xtask(&["check"]);
    expect![[r#"
        exit 1
        --- stdout
        check: 1 overlay(s) against up@$PIN12
          NONCANON 0001-Make-b-wider.patch: src/lib.c hunk #1 (0001-Make-b-wider.patch:19): git diff writes @@ -1,4 +1,4 @@ with 1+2 context lines, the overlay has @@ -1,3 +1,3 @@ with 1+1; `cargo xtask canonicalize` rewrites it canonically
        1 finding(s)
        OFFSET and NONCANON: `cargo xtask canonicalize` rewrites those overlays in place (same tree)
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    let out = f.xtask(&["check", "--json"]);
    expect![[r#"
        exit 1
        --- stdout
        {
          "schema": 1,
          "findings": [
            {
              "file": "src/lib.c",
              "hunk": 1,
              "kind": "not-canonical",
              "message": "git diff writes @@ -1,4 +1,4 @@ with 1+2 context lines, the overlay has @@ -1,3 +1,3 @@ with 1+1; `cargo xtask canonicalize` rewrites it canonically",
              "overlay": "0001-Make-b-wider.patch",
              "patch_line": 19
            }
          ],
          "rev": "$PIN",
          "upstream": "up"
        }
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    std::fs::write(f.root.join("overlays/up/stray.patch"), "x").unwrap();
    let out = f.xtask(&["check"]).code(1);
    assert!(
        out.stdout.contains("UNLISTED stray.patch"),
        "{}",
        out.stdout
    );
}

/// Runs `args`, expects exit 2 and an unchanged project, returns its outcome.
fn refused(f: &Fixture, args: &[&str]) -> Out {
    let before = f.project_snapshot();
    let out = f.xtask(args).code(2);
    assert_eq!(
        before,
        f.project_snapshot(),
        "a refused command changed files"
    );
    assert!(
        !f.root.join("target").exists() || args[0] != "apply",
        "apply wrote a tree despite the error"
    );
    out
}

fn edit_patch(f: &Fixture, from: &str, to: &str) {
    let p = f.root.join("overlays/up/0001-Make-b-wider.patch");
    let text = f.read(&p);
    assert!(text.contains(from), "fixture text lacks {from:?}:\n{text}");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn bad_pins_toml() {
    let f = fixture();
    let pins = f.read(f.root.join("pins.toml"));
    std::fs::write(f.root.join("pins.toml"), pins.replace(&f.pin, "main")).unwrap();
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/pins.toml:3: upstream.up.rev: expected a full 40-hex commit id, found "main" (branch names, tags and short ids are not pins)
    "#]]
    .assert_eq(&refused(&f, &["apply"]).snapshot());
    std::fs::write(f.root.join("pins.toml"), "[upstream.up\n").unwrap();
    assert!(
        refused(&f, &["status"])
            .stderr
            .starts_with("error: $TMP/project/pins.toml:1:")
    );
    std::fs::write(
        f.root.join("pins.toml"),
        pins.replace("overlays/up", "overlays/none"),
    )
    .unwrap();
    assert!(
        refused(&f, &["check"])
            .stderr
            .contains("upstream.up.overlays: $TMP/project/overlays/none is not a folder")
    );
    std::fs::write(f.root.join("pins.toml"), pins).unwrap();
    assert!(
        refused(&f, &["status", "--upstream", "other"])
            .stderr
            .contains("no upstream named \"other\"")
    );
}

#[test]
fn bad_series() {
    let f = fixture();
    std::fs::write(
        f.root.join("overlays/up/series"),
        "0001-Make-b-wider.patch\nmissing.patch\n",
    )
    .unwrap();
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/series:2: missing.patch: no such file in $TMP/project/overlays/up
          help: fix the name, or remove the line from the series
    "#]]
    .assert_eq(&refused(&f, &["apply"]).snapshot());
}

#[test]
fn hunk_whose_line_counts_lie() {
    let f = fixture();
    edit_patch(&f, "@@ -1,4 +1,4 @@", "@@ -1,5 +1,4 @@");
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/0001-Make-b-wider.patch:19: hunk header says -1,5 +1,4 but the body has 4 old and 4 new lines (line 25 is the signature separator)
          help: the patch was edited by hand or truncated; regenerate it with `cargo xtask --root $TMP/project refresh` or `git format-patch`
    "#]]
    .assert_eq(&refused(&f, &["apply"]).snapshot());
}

#[test]
fn truncated_patch() {
    let f = fixture();
    let p = f.root.join("overlays/up/0001-Make-b-wider.patch");
    let text = f.read(&p);
    let cut = text.find("+long b;").unwrap();
    std::fs::write(&p, &text[..cut]).unwrap();
    let err = refused(&f, &["apply"]).stderr;
    assert!(err.contains("0001-Make-b-wider.patch:19: hunk header says -1,4 +1,4 but the body has 2 old and 1 new lines (truncated at end of file)"), "{err}");
}

#[test]
fn path_traversal_absolute_and_git_dir() {
    for (from, to, why) in [
        (
            "a/src/lib.c b/src/lib.c",
            "a/../evil.c b/../evil.c",
            "leaves the tree through \"..\"",
        ),
        (
            "--- a/src/lib.c\n+++ b/src/lib.c",
            "--- a/../evil.c\n+++ b/../evil.c",
            "leaves the tree through \"..\"",
        ),
        (
            "--- a/src/lib.c\n+++ b/src/lib.c",
            "--- a/.git/config\n+++ b/.git/config",
            "is inside .git",
        ),
        (
            "--- a/src/lib.c\n+++ b/src/lib.c",
            "--- a//etc/passwd\n+++ b//etc/passwd",
            "absolute path \"/etc/passwd\" leaves the tree",
        ),
    ] {
        let f = fixture();
        edit_patch(&f, from, to);
        let err = refused(&f, &["apply"]).stderr;
        assert!(err.contains(why), "{to}: {err}");
    }
}

#[test]
fn symlinked_directory_in_the_tree_is_refused() {
    let f = Fixture::new(&[("real/x.txt", "x\n")]);
    std::os::unix::fs::symlink("real", f.upstream.join("link")).unwrap();
    f.commit_upstream(&[], "add a symlink");
    let rev = f.git(&f.upstream, &["rev-parse", "HEAD"]);
    f.write_pins(&rev);
    f.git(&f.work, &["pull", "-q"]);
    f.add_overlay(
        "Edit through the link",
        &[("real/x.txt", Some("y\n"))],
        "Overlay-Kind: local-only",
    );
    let p = f.root.join("overlays/up/0001-Edit-through-the-link.patch");
    std::fs::write(&p, f.read(&p).replace("real/x.txt", "link/x.txt")).unwrap();
    let err = refused(&f, &["apply"]).stderr;
    assert!(
        err.contains("link/x.txt goes through the symlink link; refused"),
        "{err}"
    );
}

#[test]
fn binary_patch_and_missing_trailer() {
    let f = fixture();
    edit_patch(
        &f,
        "--- a/src/lib.c\n+++ b/src/lib.c",
        "GIT binary patch\nliteral 0\nHcmV?d00001\n--- a/src/lib.c\n+++ b/src/lib.c",
    );
    assert!(
        refused(&f, &["apply"])
            .stderr
            .contains("binary patches are not supported")
    );
    let f = fixture();
    edit_patch(&f, "Overlay-Kind: upstreamable\n", "");
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/0001-Make-b-wider.patch:6: missing "Overlay-Kind:" trailer (required)
          help: end the message with a trailer paragraph, e.g. "Overlay-Kind: upstreamable" or "Overlay-Kind: local-only"
    "#]]
    .assert_eq(&refused(&f, &["status"]).snapshot());
    let f = fixture();
    edit_patch(&f, "Overlay-Kind: upstreamable", "Overlay-Kind: maybe");
    assert!(refused(&f, &["status"]).stderr.contains(
        ":8: Overlay-Kind: expected \"upstreamable\" or \"local-only\", found \"maybe\""
    ));
    let f = fixture();
    edit_patch(&f, "Depends-On: src/lib.c::a", "Depends-On: qdot");
    assert!(
        refused(&f, &["status"])
            .stderr
            .contains("Depends-On: expected \"<path>::<symbol>\"")
    );
}

/// Every `--json` report carries `"schema": 1`, and every error, whatever the command, is
/// `{"schema": 1, "error": "..."}` on stdout with exit 2 (docs/json.md).
#[test]
fn every_json_report_is_versioned_and_errors_share_one_shape() {
    let f = Fixture::new(&[("src/lib.c", "int a;\nint b;\n")]);
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("int a;\nlong b;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    let next = f.commit_upstream(&[("README", "readme\n")], "next");
    let reports: &[&[&str]] = &[
        &["status", "--json"],
        &["check", "--json"],
        &["apply", "--json"],
        &["drift", "--json"],
        &["bump-pin", &next, "--dry-run", "--json"],
    ];
    for args in reports {
        let out = f.xtask(args);
        assert!(
            out.code == 0 || out.code == 1,
            "{args:?}: {}{}",
            out.stdout,
            out.stderr
        );
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout));
        assert_eq!(v["schema"], 1, "{args:?}: {}", out.stdout);
        // The version first, where a reader looks before reading on (issue 29, part 3).
        assert!(
            out.stdout.starts_with("{\n  \"schema\": 1,\n"),
            "{args:?}: {}",
            out.stdout
        );
    }
    // "Already pinned" and --abort answer in JSON too.
    let pinned = f.xtask(&["bump-pin", &f.pin, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&pinned.stdout).expect(&pinned.stdout);
    assert_eq!(
        (v["schema"].as_u64(), v["moved"].as_bool()),
        (Some(1), Some(false))
    );
    let clash = f.commit_upstream(&[("src/lib.c", "int a;\nshort b;\n")], "clash");
    f.xtask(&["bump-pin", &clash]).code(1);
    let aborted = f.xtask(&["bump-pin", "--abort", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&aborted.stdout).expect(&aborted.stdout);
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["abandoned"], clash.as_str(), "{v}");
    let errors: &[&[&str]] = &[
        &["bump-pin", "no-such-rev", "--json"],
        &["refresh", "--into", "no-such-overlay", "--json"],
        &[
            "build-mlx",
            "--backend",
            "cpu",
            "--bundle",
            "x.tar.gz",
            "--json",
        ],
    ];
    for args in errors {
        let out = f.xtask(args).code(2);
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout));
        assert_eq!(v["schema"], 1, "{args:?}: {}", out.stdout);
        assert!(
            out.stdout.starts_with("{\"schema\":1,"),
            "{args:?}: {}",
            out.stdout
        );
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{args:?}: {v}"
        );
    }
}

/// Colours never reach a pipe or a file, with or without `NO_COLOR` (on a terminal, `check`,
/// `drift` and errors are coloured unless `NO_COLOR` is set; checked by hand with `script`, whose
/// pseudo-terminal behaved differently under the test harness).
#[test]
fn no_colour_codes_in_pipes() {
    let f = Fixture::new(&[("src/lib.c", "int a;\nint b;\n")]);
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("int a;\nlong b;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    for args in [
        &["check"][..],
        &["drift"],
        &["status"],
        &["bump-pin", "nope"],
    ] {
        let out = f.xtask(args);
        assert!(
            !out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'),
            "{args:?}: {} {}",
            out.stdout,
            out.stderr
        );
    }
}

/// `check` validates `Depends-On:` trailers against upstream at the pin: a typo is a finding at
/// the trailer's line (exit 1), not a surprise in the drift canary later.
#[test]
fn check_finds_a_depends_on_that_names_nothing() {
    let f = Fixture::new(&[("src/lib.c", "int a(void) {\n  return 1;\n}\nint b;\n")]);
    let name = f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("int a(void) {\n  return 1;\n}\nlong b;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\nDepends-On: src/lib.c::a\nDepends-On: src/lib.c::aa\nDepends-On: src/gone.c::a\n",
    );
    let out = f.xtask(&["check"]).code(1);
    let raw = f.read(f.root.join("overlays/up").join(&name));
    let line_of = |needle: &str| raw.lines().position(|l| l == needle).unwrap() + 1;
    assert!(
        out.stdout.contains(&format!(
            "DEPENDS  {name}: src/lib.c: Depends-On: src/lib.c::aa: no such definition"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("Depends-On: src/gone.c::a: upstream has no such file"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("src/lib.c::a:"),
        "a real definition is no finding: {}",
        out.stdout
    );
    assert!(out.stdout.contains("2 finding(s)"), "{}", out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&f.xtask(&["check", "--json"]).code(1).stdout).unwrap();
    let lines: Vec<_> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["patch_line"].as_u64().unwrap() as usize)
        .collect();
    assert_eq!(
        lines,
        [
            line_of("Depends-On: src/lib.c::aa"),
            line_of("Depends-On: src/gone.c::a")
        ]
    );
}

/// A dry run ends with one line that counts what the bump would do with the overlays and says
/// that nothing was written, with the command that bumps (issue 29, part 3).
#[test]
fn a_dry_run_says_what_it_would_do_and_that_nothing_was_written() {
    let f = Fixture::new(&[("src/lib.c", "int a;\nint b;\n")]);
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("int a;\nlong b;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    f.commit_upstream(&[("src/lib.c", "int z;\nint a;\nint b;\n")], "next");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "main", "--dry-run"]);
    expect![[r#"
        exit 0
        --- stdout
        bump-pin: up $PIN12 -> 7b6c50d678db (dry run)
          context-drift 0001-Make-b-wider.patch: rewritten
        dry run: 1 overlay(s): 1 rewritten; nothing was written (to bump: `cargo xtask --root $TMP/project bump-pin main`)
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    assert_eq!(before, f.project_snapshot(), "a dry run writes nothing");
}
