//! interdiff: the series at two commits of the fork (or a commit and the working tree), overlay by
//! overlay, context-only changes told from content changes; `--lint-refresh`, `--markdown`, `--json`.

use expect_test::expect;

use crate::fixture::Fixture;

fn lines(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

fn plain(i: usize) -> String {
    format!("line {i}\n")
}

/// A fork (a git repository) with two overlays, and an upstream commit that moves the first one's
/// lines down (a clean bump: context only). Returns the fixture and that commit.
pub(crate) fn fork_with_moving_upstream() -> (Fixture, String) {
    let f = Fixture::new(&[("a.txt", &lines(plain)), ("b.txt", "b\n")]);
    let ten = lines(|i| {
        if i == 10 {
            "line TEN\n".into()
        } else {
            plain(i)
        }
    });
    f.add_overlay(
        "Change line 10",
        &[("a.txt", Some(&ten))],
        "Overlay-Kind: upstreamable",
    );
    f.add_overlay(
        "Change b",
        &[("b.txt", Some("B\n"))],
        "Overlay-Kind: local-only",
    );
    f.init_fork();
    let new = f.commit_upstream(&[("a.txt", &format!("new top\n{}", lines(plain)))], "grow");
    (f, new)
}

#[test]
fn a_clean_bump_is_context_only_before_and_after_its_commit() {
    let (f, new) = fork_with_moving_upstream();
    f.xtask(&["bump-pin", "main"]).ok();
    // Uncommitted: --from defaults to HEAD (its pin differs from the working tree's).
    let out = f.xtask(&["interdiff", "--lint-refresh"]);
    let text = out.snapshot().replace(&new[..12], "$NEW12");
    let text = text.replace(&f.git(&f.root, &["rev-parse", "HEAD"])[..12], "$HEAD12");
    expect![[r#"
        exit 0
        --- stdout
        interdiff: up $HEAD12 (pin $PIN12) -> working tree (pin $NEW12)
          context     0001-Change-line-10.patch
              context: hunk headers (line numbers, function headings, how hunks are split), index lines
          unchanged   0002-Change-b.patch
        2 overlay(s): 1 context, 1 unchanged
        --- stderr
    "#]]
    .assert_eq(&text);
    // Committed: --from defaults to the newest commit before the pin moved, the same comparison.
    f.commit_fork("bump up");
    let again = f
        .xtask(&["interdiff", "--lint-refresh", "--to", "HEAD"])
        .ok();
    assert!(
        again
            .stdout
            .contains("context     0001-Change-line-10.patch")
            && again.stdout.contains("(pin $PIN12)"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_content_change_fails_lint_refresh_in_every_format() {
    let (f, _) = fork_with_moving_upstream();
    let p = f.root.join("overlays/up/0001-Change-line-10.patch");
    let text = f.read(&p).replace("+line TEN\n", "+line 10, rewritten\n");
    std::fs::write(
        &p,
        text.replace("Overlay-Kind: upstreamable", "Overlay-Kind: local-only"),
    )
    .unwrap();
    let before = f.project_snapshot();
    let out = f.xtask(&["interdiff", "--lint-refresh"]);
    let head = f.git(&f.root, &["rev-parse", "HEAD"]);
    expect![[r#"
        exit 1
        --- stdout
        interdiff: up $HEAD12 (pin $PIN12) -> working tree (pin $PIN12)
          content     0001-Change-line-10.patch
              trailers:
                -Overlay-Kind: upstreamable
                +Overlay-Kind: local-only
              lines in a.txt:
                -+line TEN
                ++line 10, rewritten
          unchanged   0002-Change-b.patch
        2 overlay(s): 1 content, 1 unchanged
        not a refresh: 0001-Change-line-10.patch: its content changed (trailers, lines in a.txt)
        --- stderr
    "#]]
    .assert_eq(&out.snapshot().replace(&head[..12], "$HEAD12"));
    assert_eq!(before, f.project_snapshot(), "interdiff writes nothing");
    // Without --lint-refresh the same report is no finding.
    f.xtask(&["interdiff"]).ok();
    let json = f.xtask(&["interdiff", "--lint-refresh", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["schema"], 1);
    assert_eq!(v["from"]["commit"], head.as_str());
    assert_eq!(v["to"]["commit"], serde_json::Value::Null);
    assert_eq!(v["overlays"][0]["status"], "content");
    assert_eq!(v["overlays"][0]["content"][1]["file"], "a.txt");
    assert_eq!(v["findings"].as_array().unwrap().len(), 1);
    let md = f.xtask(&["interdiff", "--markdown"]).ok();
    assert!(
        md.stdout.contains(
            "| 0001-Change-line-10.patch | content | **trailers**, **lines** in `a.txt` |"
        ) && md
            .stdout
            .contains("```diff\n# trailers\n-Overlay-Kind: upstreamable"),
        "{}",
        md.stdout
    );
}

#[test]
fn renamed_added_and_removed_overlays_are_named() {
    let (f, _) = fork_with_moving_upstream();
    let dir = f.root.join("overlays/up");
    std::fs::rename(
        dir.join("0002-Change-b.patch"),
        dir.join("0003-Change-b.patch"),
    )
    .unwrap();
    std::fs::write(dir.join("series"), "0003-Change-b.patch\n").unwrap();
    let out = f.xtask(&["interdiff", "--lint-refresh"]).code(1);
    assert!(
        out.stdout
            .contains("unchanged   0003-Change-b.patch (renamed from 0002-Change-b.patch)")
            && out.stdout.contains("removed     0001-Change-line-10.patch")
            && out
                .stdout
                .contains("not a refresh: 0001-Change-line-10.patch: removed"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_bad_rev_or_no_repository_is_an_error_that_names_it() {
    let (f, _) = fork_with_moving_upstream();
    let before = f.project_snapshot();
    let out = f.xtask(&["interdiff", "--from", "no-such-branch"]);
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: no-such-branch: not a fork commit to read the series from: revspec 'no-such-branch' not found; nothing was written
          help: name a commit of this fork's history whose pins.toml and overlays to compare, e.g. HEAD~1, a branch or a commit id (`git log --oneline -- pins.toml` lists the commits that moved a pin)
    "#]]
    .assert_eq(&out.snapshot());
    assert_eq!(before, f.project_snapshot());
    // A commit whose pins.toml is broken is named with its line.
    std::fs::write(f.root.join("pins.toml"), "[upstream.up]\nurl = 3\n").unwrap();
    let bad = f.commit_fork("broken pins");
    f.git(&f.root, &["checkout", "HEAD~1", "--", "pins.toml"]);
    let out = f
        .xtask(&["interdiff", "--from", &bad[..10], "--to", "HEAD~1"])
        .code(2);
    assert!(
        out.stderr.contains(&format!("{}:pins.toml:2", &bad[..10])),
        "{}",
        out.stderr
    );
    // A project outside any git repository.
    let g = Fixture::new(&[("a.txt", "a\n")]);
    let out = g.xtask(&["interdiff", "--json"]).code(2);
    assert!(
        out.stderr.contains("not in a git work tree") && out.stdout.contains("\"kind\":\"input\""),
        "{}{}",
        out.stdout,
        out.stderr
    );
}
