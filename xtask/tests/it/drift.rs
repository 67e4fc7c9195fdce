//! drift on synthetic histories: one test per class, the priority clashes, blame, and exit codes.

use expect_test::expect;

use crate::fixture::Fixture;

/// A C file with a long function (`compute`), a helper it calls, and a function (`shadow`) whose
/// block differs from compute's by one line.
fn source(helper_body: &str, compute_extra: &str, block: &str, top: &str) -> String {
    source_with_shadow(
        helper_body,
        compute_extra,
        block,
        top,
        &SHARED.replace("b += 70;", "b += 77;"),
    )
}

/// Like [`source`], with `shadow` holding `shadow_block`.
fn source_with_shadow(
    helper_body: &str,
    compute_extra: &str,
    block: &str,
    top: &str,
    shadow_block: &str,
) -> String {
    format!(
        "{top}int helper(int x) {{\n  {helper_body}\n}}\n\nint compute(int a) {{\n  int b = a * 2;\n  int z1 = 1;\n  int z2 = 2;\n  int z3 = 3;\n{block}  int y1 = 4;\n  int y2 = 5;\n  int y3 = 6;\n  {compute_extra}\n  return helper(b);\n}}\n\nint shadow(int a) {{\n  int b = a;\n{shadow_block}  return b;\n}}\n"
    )
}

const SHARED: &str =
    "  b += 10;\n  b += 20;\n  b += 30;\n  b += 40;\n  b += 50;\n  b += 60;\n  b += 70;\n";
const SHARED_PATCHED: &str =
    "  b += 10;\n  b += 20;\n  b += 30;\n  b += 41;\n  b += 50;\n  b += 60;\n  b += 70;\n";

fn base() -> String {
    source("return x + 1;", "int w = 7;", SHARED, "")
}

fn fixture(overlay_block: &str, trailers: &str) -> Fixture {
    let f = Fixture::new(&[("src/lib.c", &base()), ("README", "readme\n")]);
    f.add_overlay(
        "Tune compute",
        &[(
            "src/lib.c",
            Some(&source("return x + 1;", "int w = 7;", overlay_block, "")),
        )],
        trailers,
    );
    f
}

const DEP: &str = "Overlay-Kind: upstreamable\nDepends-On: src/lib.c::helper";

#[track_caller]
fn drift_json(f: &Fixture, args: &[&str], code: i32) -> serde_json::Value {
    let mut all = vec!["drift", "--json"];
    all.extend_from_slice(args);
    let out = f.xtask(&all).code(code);
    serde_json::from_str(&out.stdout).unwrap()
}

fn status(v: &serde_json::Value) -> &str {
    v["overlays"][0]["status"].as_str().unwrap()
}

#[test]
fn clean_when_upstream_changes_elsewhere() {
    let f = fixture(SHARED_PATCHED, DEP);
    f.commit_upstream(&[("README", "readme 2\n")], "docs");
    assert_eq!(status(&drift_json(&f, &[], 0)), "clean");
}

#[test]
fn moved_when_only_offsets_change() {
    let f = fixture(SHARED_PATCHED, DEP);
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source(
                "return x + 1;",
                "int w = 7;",
                SHARED,
                "int first(void) {\n  return 0;\n}\n\n",
            ),
        )],
        "new function on top",
    );
    let v = drift_json(&f, &[], 0);
    assert_eq!(status(&v), "moved");
    assert_eq!(
        v["overlays"][0]["hunks"][0]["actual"].as_u64().unwrap()
            - v["overlays"][0]["hunks"][0]["recorded"].as_u64().unwrap(),
        4
    );
}

#[test]
fn context_drift_when_the_enclosing_function_changes() {
    let f = fixture(SHARED_PATCHED, "Overlay-Kind: upstreamable");
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return x + 1;", "int w = 8;", SHARED, ""),
        )],
        "tweak compute far from the hunk",
    );
    let v = drift_json(&f, &[], 1);
    assert_eq!(status(&v), "context-drift");
    assert_eq!(
        v["overlays"][0]["changed_symbols"],
        serde_json::json!(["compute"])
    );
    let change = &v["overlays"][0]["symbol_changes"][0];
    assert_eq!(change["watched_because"], "encloses hunk #1 of src/lib.c");
    assert!(
        change["diff"]
            .as_str()
            .unwrap()
            .contains("-  int w = 7;\n+  int w = 8;\n"),
        "{change}"
    );
}

#[test]
fn context_drift_when_a_declared_dependency_changes() {
    let f = fixture(SHARED_PATCHED, DEP);
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return x + 2;", "int w = 7;", SHARED, ""),
        )],
        "helper changes",
    );
    let out = f.xtask(&["drift"]);
    expect![[r#"
        exit 1
        --- stdout
        drift: up $PIN12 -> 6ce8b66f75ae
          context-drift  0001-Tune-compute.patch
              changed upstream: src/lib.c::helper (Depends-On)
                @@ -1,3 +1,3 @@
                 int helper(int x) {
                -  return x + 1;
                +  return x + 2;
                 }
        1 overlay(s): 1 context-drift
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    // A comment-only or whitespace-only edit of the dependency is not drift.
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return   x + 1; // same", "int w = 7;", SHARED, ""),
        )],
        "reformat helper",
    );
    assert_eq!(status(&drift_json(&f, &[], 0)), "clean");
}

#[test]
fn upstreamed_fully_and_partially() {
    let f = fixture(SHARED_PATCHED, DEP);
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return x + 1;", "int w = 7;", SHARED_PATCHED, ""),
        )],
        "adopt the overlay",
    );
    let v = drift_json(&f, &[], 1);
    assert_eq!(status(&v), "upstreamed");
    assert_eq!(v["overlays"][0]["partially_upstreamed"], false);

    // Two hunks; upstream adopts only the first.
    let f = Fixture::new(&[(
        "a.txt",
        &(1..=40).map(|i| format!("l{i}\n")).collect::<String>(),
    )]);
    let both = (1..=40)
        .map(|i| {
            if i == 5 || i == 30 {
                format!("L{i}\n")
            } else {
                format!("l{i}\n")
            }
        })
        .collect::<String>();
    f.add_overlay(
        "Two changes",
        &[("a.txt", Some(&both))],
        "Overlay-Kind: upstreamable",
    );
    let one = (1..=40)
        .map(|i| {
            if i == 5 {
                format!("L{i}\n")
            } else {
                format!("l{i}\n")
            }
        })
        .collect::<String>();
    f.commit_upstream(&[("a.txt", &one)], "take one");
    // Partly upstream: carried by the merge, but the bump stops for review (docs/drift.md).
    let v = drift_json(&f, &[], 1);
    assert_eq!(status(&v), "review");
    assert_eq!(v["overlays"][0]["partially_upstreamed"], true);
    assert_eq!(v["overlays"][0]["hunks"][0]["status"], "upstreamed");
    assert_eq!(v["overlays"][0]["hunks"][1]["status"], "exact");
}

#[test]
fn conflict_when_the_context_changes() {
    let f = fixture(SHARED_PATCHED, DEP);
    let changed = SHARED.replace("b += 30;", "b += 33;");
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return x + 1;", "int w = 7;", &changed, ""),
        )],
        "edit the block",
    );
    let v = drift_json(&f, &[], 1);
    assert_eq!(status(&v), "conflict");
    assert!(
        v["overlays"][0]["hunks"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("context does not match"),
        "{v}"
    );
}

#[test]
fn context_found_only_in_another_function_is_a_conflict_not_a_move() {
    // At the pin shadow repeats compute's block verbatim; the overlay was written in compute.
    let f = Fixture::new(&[(
        "src/lib.c",
        &source_with_shadow("return x + 1;", "int w = 7;", SHARED, "", SHARED),
    )]);
    f.add_overlay(
        "Tune compute",
        &[(
            "src/lib.c",
            Some(&source_with_shadow(
                "return x + 1;",
                "int w = 7;",
                SHARED_PATCHED,
                "",
                SHARED,
            )),
        )],
        DEP,
    );
    // Upstream edits compute's copy; the identical block in shadow still matches.
    let changed = SHARED.replace("b += 30;", "b += 33;");
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source_with_shadow("return x + 1;", "int w = 7;", &changed, "", SHARED),
        )],
        "edit compute's block",
    );
    let v = drift_json(&f, &[], 1);
    assert_eq!(status(&v), "conflict");
    let reason = v["overlays"][0]["hunks"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("inside shadow") && reason.contains("written inside compute"),
        "{reason}"
    );
}

#[test]
fn priority_conflict_over_upstreamed_and_upstreamed_over_context_drift() {
    let lines = |f: &dyn Fn(usize) -> String| (1..=40).map(f).collect::<String>();
    let f = Fixture::new(&[("a.txt", &lines(&|i| format!("l{i}\n")))]);
    f.add_overlay(
        "Two changes",
        &[(
            "a.txt",
            Some(&lines(&|i| {
                if i == 5 || i == 30 {
                    format!("L{i}\n")
                } else {
                    format!("l{i}\n")
                }
            })),
        )],
        "Overlay-Kind: upstreamable",
    );
    // Hunk 1 adopted upstream, hunk 2's context destroyed.
    f.commit_upstream(
        &[(
            "a.txt",
            &lines(&|i| match i {
                5 => "L5\n".into(),
                29 => "x29\n".into(),
                _ => format!("l{i}\n"),
            }),
        )],
        "mixed",
    );
    assert_eq!(status(&drift_json(&f, &[], 1)), "conflict");

    let f = fixture(SHARED_PATCHED, DEP);
    // Adopted, and the dependency changed too: upstreamed wins.
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source("return x + 2;", "int w = 7;", SHARED_PATCHED, ""),
        )],
        "adopt and change helper",
    );
    assert_eq!(status(&drift_json(&f, &[], 1)), "upstreamed");
}

#[test]
fn blame_names_the_commit_that_caused_the_final_status() {
    let f = fixture(SHARED_PATCHED, DEP);
    f.commit_upstream(&[("README", "r2\n")], "unrelated one");
    let moved = f.commit_upstream(
        &[(
            "src/lib.c",
            &source(
                "return x + 1;",
                "int w = 7;",
                SHARED,
                "int first(void) {\n  return 0;\n}\n\n",
            ),
        )],
        "move things",
    );
    let drifted = f.commit_upstream(
        &[(
            "src/lib.c",
            &source(
                "return x + 9;",
                "int w = 7;",
                SHARED,
                "int first(void) {\n  return 0;\n}\n\n",
            ),
        )],
        "helper changes",
    );
    f.commit_upstream(&[("README", "r3\n")], "unrelated two");
    let v = drift_json(&f, &["--per-commit"], 1);
    assert_eq!(v["commits"], 4);
    assert_eq!(
        v["evaluated"], 2,
        "commits that touch no relevant blob are not evaluated"
    );
    assert_eq!(v["overlays"][0]["blame"]["sha"], drifted.as_str());
    assert_eq!(v["overlays"][0]["blame"]["subject"], "helper changes");
    let v = drift_json(&f, &["--per-commit", "--to", &moved], 0);
    assert_eq!(status(&v), "moved");
    assert_eq!(v["overlays"][0]["blame"]["sha"], moved.as_str());
}

#[test]
fn the_series_is_evaluated_as_a_chain() {
    let f = fixture(SHARED_PATCHED, DEP);
    let second = SHARED_PATCHED.replace("b += 41;", "b += 42;");
    f.add_overlay(
        "On top",
        &[(
            "src/lib.c",
            Some(&source("return x + 1;", "int w = 7;", &second, "")),
        )],
        "Overlay-Kind: local-only",
    );
    f.commit_upstream(
        &[(
            "src/lib.c",
            &source(
                "return x + 1;",
                "int w = 7;",
                SHARED,
                "int first(void) {\n  return 0;\n}\n\n",
            ),
        )],
        "move",
    );
    let v = drift_json(&f, &[], 0);
    assert_eq!(v["overlays"][0]["status"], "moved");
    assert_eq!(v["overlays"][1]["status"], "moved");
}

#[test]
fn bad_revs_and_bad_dependencies() {
    let f = fixture(
        SHARED_PATCHED,
        "Overlay-Kind: upstreamable\nDepends-On: src/lib.c::nonexistent",
    );
    let out = f.xtask(&["drift"]).code(2);
    assert!(
        out.stderr.contains(
            "Depends-On: src/lib.c::nonexistent: no such definition in upstream at the pin"
        ),
        "{}",
        out.stderr
    );
    let f = fixture(SHARED_PATCHED, DEP);
    let out = f.xtask(&["drift", "--to", "no-such-branch"]).code(2);
    assert!(out.stderr.contains("no-such-branch"), "{}", out.stderr);
}

/// Sets or clears the executable bit of `path`.
fn chmod_x(path: &std::path::Path, on: bool) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if on { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn per_commit_blames_a_mode_only_change_on_the_commit_that_made_it() {
    // repro turn3/O: a commit that changes only a mode keeps every blob id, and was never
    // evaluated, so the overlay's `upstreamed` went to the next commit that changed a blob.
    let c: String = (1..=12).map(|i| format!("int c{i};\n")).collect();
    let f = Fixture::new(&[("run.sh", "#!/bin/sh\necho run\n"), ("a.c", &c)]);
    chmod_x(&f.work.join("run.sh"), true);
    f.git(&f.work, &["add", "-A"]);
    f.git(
        &f.work,
        &[
            "commit",
            "-q",
            "-m",
            "run.sh executable (fork)\n\nOverlay-Kind: local-only",
        ],
    );
    f.format_patch_head();
    f.add_overlay(
        "a.c comment",
        &[("a.c", Some(&c.replace("int c1;", "int c1; // fork")))],
        "Overlay-Kind: local-only",
    );
    chmod_x(&f.upstream.join("run.sh"), true);
    let chmod = f.commit_upstream(&[], "run.sh executable");
    f.commit_upstream(
        &[("a.c", &c.replace("int c12;", "int c12 = 0;"))],
        "a.c: c12",
    );
    let v = drift_json(&f, &["--per-commit"], 1);
    assert_eq!(status(&v), "upstreamed", "{v}");
    assert_eq!(v["evaluated"], 2, "{v}");
    assert_eq!(v["overlays"][0]["blame"]["sha"], chmod.as_str(), "{v}");
    assert_eq!(v["overlays"][0]["blame"]["subject"], "run.sh executable");
}
