//! export-upstream: upstreamable overlays only, re-based, trailers stripped, verified with git am.

use expect_test::expect;

use crate::fixture::Fixture;

fn lines(n: usize, f: impl Fn(usize) -> String) -> String {
    (1..=n).map(f).collect()
}

fn fixture() -> Fixture {
    let f = Fixture::new(&[
        ("a.txt", &lines(20, |i| format!("a{i}\n"))),
        ("b.txt", &lines(20, |i| format!("b{i}\n"))),
        ("local.txt", "local\n"),
    ]);
    f.add_overlay("Improve a", &[("a.txt", Some(&lines(20, |i| if i == 10 { "A10\n".into() } else { format!("a{i}\n") })))], "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\nDepends-On: a.txt::nothing\nReviewed-by: Bo <bo@example.com>");
    f.add_overlay(
        "Fork policy",
        &[("local.txt", Some("fork policy\n"))],
        "Overlay-Kind: local-only",
    );
    f.add_overlay(
        "Improve b",
        &[(
            "b.txt",
            Some(&lines(20, |i| {
                if i == 5 {
                    "B5 (see docs/numbers.md)\n".into()
                } else {
                    format!("b{i}\n")
                }
            })),
        )],
        "Overlay-Kind: upstreamable",
    );
    std::fs::create_dir_all(f.root.join("docs")).unwrap();
    std::fs::write(
        f.root.join("docs/numbers.md"),
        "# Numbers\n\n| m | ms |\n|---|---|\n| 1 | 18.6 |\n\nmore text\n",
    )
    .unwrap();
    f
}

#[test]
fn exports_upstreamable_overlays_without_fork_trailers() {
    let f = fixture();
    let out = f.xtask(&["export-upstream", "--signoff"]);
    expect![[r#"
        exit 0
        --- stdout
        export-upstream: 2 overlay(s) onto up@$PIN12 in $TMP/project/target/export/up
          0001-Improve-a.patch  (from 0001-Improve-a.patch)
          0002-Improve-b.patch  (from 0003-Improve-b.patch)
        verified: the series `git am`s onto $PIN12
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    let dir = f.root.join("target/export/up");
    let first = f.read(dir.join("0001-Improve-a.patch"));
    assert!(
        first.contains("Subject: [PATCH 1/2] Improve a\n"),
        "{first}"
    );
    assert!(first.contains("Why: a test needs it.\n\nReviewed-by: Bo <bo@example.com>\nSigned-off-by: Ada Overlay <ada@example.com>\n---\n"), "{first}");
    for t in ["Overlay-Kind", "Upstream-Status", "Depends-On"] {
        assert!(!first.contains(t), "{t} must be stripped:\n{first}");
    }
    let second = f.read(dir.join("0002-Improve-b.patch"));
    assert!(
        second.contains("Subject: [PATCH 2/2] Improve b\n") && !second.contains("local"),
        "{second}"
    );
    expect![[r#"
        # Improve a (series of 2)

        ## Motivation

        ### Improve a

        Why: a test needs it.

        Reviewed-by: Bo <bo@example.com>

        ### Improve b

        Why: a test needs it.

        ## What was measured

        The commit messages above carry the measurements.

        ## How it was tested

        - The series applies with `git am` onto $PIN (verified when this was generated).
        - In the fork these changes are carried as overlays checked by `cargo xtask check` and exercised by the fork's test suite at the pin.
    "#]]
    .assert_eq(&f.scrub(&f.read(dir.join("PR.md"))));
    // git am of the exported series gives upstream + the two upstreamable changes, not the local one.
    let am = f.t().join("am");
    f.git(
        f.t(),
        &[
            "clone",
            "-q",
            f.upstream.to_str().unwrap(),
            am.to_str().unwrap(),
        ],
    );
    f.git(&am, &["checkout", "-q", "--detach", &f.pin]);
    for p in ["0001-Improve-a.patch", "0002-Improve-b.patch"] {
        f.git(&am, &["am", "-q", dir.join(p).to_str().unwrap()]);
    }
    assert!(f.read(am.join("a.txt")).contains("A10\n") && f.read(am.join("b.txt")).contains("B5"));
    assert_eq!(
        f.read(am.join("local.txt")),
        "local\n",
        "local-only content never leaves the fork"
    );
}

#[test]
fn exports_onto_a_later_commit_and_creates_a_branch() {
    let f = fixture();
    let later = f.commit_upstream(
        &[(
            "a.txt",
            &format!("new1\nnew2\n{}", lines(20, |i| format!("a{i}\n"))),
        )],
        "upstream grows",
    );
    let out = f
        .xtask(&[
            "export-upstream",
            "--onto",
            &later,
            "--overlay",
            "0001-Improve-a.patch",
            "--branch",
            "streamed",
        ])
        .ok();
    assert!(
        out.stdout.contains("1 overlay(s) onto") && out.stdout.contains("branch streamed created"),
        "{}",
        out.stdout
    );
    let p = f.read(f.root.join("target/export/up/0001-Improve-a.patch"));
    assert!(
        p.contains("Subject: [PATCH] Improve a\n") && p.contains("@@ -9,7 +9,7 @@"),
        "re-based onto the later commit:\n{p}"
    );
}

#[test]
fn local_only_overlays_cannot_be_exported_and_dependencies_are_named() {
    let f = fixture();
    let out = f
        .xtask(&["export-upstream", "--overlay", "0002-Fork-policy.patch"])
        .code(2);
    assert!(
        out.stderr.contains("0002-Fork-policy.patch is local-only"),
        "{}",
        out.stderr
    );
    // An upstreamable overlay whose hunk sits on lines the local-only overlay wrote.
    f.add_overlay(
        "Tune the policy",
        &[("local.txt", Some("fork policy, tuned\n"))],
        "Overlay-Kind: upstreamable",
    );
    let before = f.project_snapshot();
    let out = f.xtask(&["export-upstream"]).code(1);
    assert!(
        out.stdout
            .contains("0004-Tune-the-policy.patch: local.txt hunk #1 does not merge")
            && out.stdout.contains("it needs 0002-Fork-policy.patch"),
        "{}",
        out.stdout
    );
    assert_eq!(before, f.project_snapshot());
    assert!(!f.root.join("target/export").exists(), "nothing written");
}
