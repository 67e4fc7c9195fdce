//! The workflow around a bump a fork maintainer walks (issue 24): every stop has a way out that
//! works, and no command silently drops, strands or loses an overlay.

use expect_test::expect;

use crate::fixture::Fixture;

/// Twenty numbered lines with line `at` replaced by `with`.
fn twenty(at: usize, with: &str) -> String {
    (1..=20)
        .map(|i| {
            if i == at {
                format!("{with}\n")
            } else {
                format!("{i}\n")
            }
        })
        .collect()
}

/// Replaces every conflict region (`<<<<<<< ` to `>>>>>>> `) of `path` by `with`.
fn resolve(path: &std::path::Path, with: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with("<<<<<<< ") {
            inside = true;
            out.push_str(with);
        } else if l.starts_with(">>>>>>> ") {
            inside = false;
        } else if !inside {
            out.push_str(l);
            out.push('\n');
        }
    }
    std::fs::write(path, out).unwrap();
}

/// Overlays on x, y, z (line 5, 10, 5); upstream then changes x and z at line 5 (conflicts) and
/// adopts y's change (0002 is upstreamed).
fn upstreamed_between_conflicts() -> (Fixture, String) {
    let n = twenty(0, "");
    let f = Fixture::new(&[("x.txt", &n), ("y.txt", &n), ("z.txt", &n)]);
    let kind = "Overlay-Kind: local-only";
    f.add_overlay("X", &[("x.txt", Some(&twenty(5, "X5")))], kind);
    f.add_overlay("Y", &[("y.txt", Some(&twenty(10, "Y10")))], kind);
    f.add_overlay("Z", &[("z.txt", Some(&twenty(5, "Z5")))], kind);
    let new = f.commit_upstream(
        &[
            ("x.txt", &twenty(5, "upstream5")),
            ("y.txt", &twenty(10, "Y10")),
            ("z.txt", &twenty(5, "upstream5")),
        ],
        "x, z: line 5; y: the fork's Y10",
    );
    (f, new)
}

/// D: an upstreamed overlay met after a `--continue` is not deleted without `--drop-upstreamed`:
/// the final `--continue` stops for it like a clean bump (exit 1, nothing written) and names the
/// command that retires it; that command finishes the bump.
#[test]
fn continue_keeps_an_upstreamed_overlay_unless_asked_to_drop_it() {
    let (f, new) = upstreamed_between_conflicts();
    let tree = f.root.join("target/bump/up");
    f.xtask(&["bump-pin", "main"]).code(1);
    resolve(&tree.join("x.txt"), "X5\n");
    f.xtask(&["bump-pin", "--continue"]).code(1);
    resolve(&tree.join("z.txt"), "Z5\n");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "--continue"]);
    expect![[r#"
        exit 1
        --- stdout
        bump-pin: up $PIN12 -> e20c3090796b
          conflict      0001-X.patch: rewritten
          upstreamed    0002-Y.patch: upstreamed: pass --drop-upstreamed to retire it
          conflict      0003-Z.patch: resolved by hand
        pins.toml and overlays/ are unchanged; `cargo xtask --root $TMP/project bump-pin --continue --drop-upstreamed` retires the upstreamed overlay(s)
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    assert_eq!(before, f.project_snapshot(), "nothing was written");
    let out = f.xtask(&["bump-pin", "--continue", "--drop-upstreamed"]).ok();
    assert!(out.stdout.contains("0002-Y.patch: dropped"), "{}", out.stdout);
    assert!(!f.root.join("overlays/up/0002-Y.patch").exists());
    assert!(f.read(f.root.join("pins.toml")).contains(&new));
    f.xtask(&["check"]).ok();
}

/// Q: an overlay file the series does not list would be stranded at the old pin: the bump is
/// refused (exit 2, the file named with both ways out), nothing written.
#[test]
fn a_bump_refuses_to_strand_an_unlisted_overlay() {
    let f = Fixture::new(&[("a.txt", &twenty(0, "")), ("b.txt", "b\n")]);
    let kind = "Overlay-Kind: local-only";
    f.add_overlay("A", &[("a.txt", Some(&twenty(3, "A3")))], kind);
    f.add_overlay("B", &[("b.txt", Some("B\n"))], kind);
    let series = f.root.join("overlays/up/series");
    std::fs::write(&series, "0001-A.patch\n").unwrap();
    f.commit_upstream(&[("c.txt", "c\n")], "unrelated");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "main"]);
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/series: 1 overlay file(s) not listed in the series would be stranded at the old pin by the bump: 0002-B.patch; nothing was written
          help: add each to the series where it belongs (`cargo xtask --root $TMP/project check` lists them as UNLISTED), or delete the file if it is retired (`git rm`), then bump
    "#]]
    .assert_eq(&out.snapshot());
    assert_eq!(before, f.project_snapshot());
    assert!(!f.root.join("target/bump/up").exists());
}

/// Overlay 0001 changes line 10; upstream makes the same change and one more on line 11: a
/// conflict whose right answer is "take upstream".
fn taken_upstream() -> Fixture {
    let f = Fixture::new(&[("a.txt", &twenty(0, ""))]);
    f.add_overlay(
        "Ten",
        &[("a.txt", Some(&twenty(10, "TEN")))],
        "Overlay-Kind: upstreamable",
    );
    let both = twenty(10, "TEN").replace("\n11\n", "\nELEVEN\n");
    f.commit_upstream(&[("a.txt", &both)], "upstream: TEN and ELEVEN");
    f
}

/// J: a conflict resolved to the new upstream's side finishes: refused without
/// `--drop-upstreamed` with help naming the flag that works, then retired with it (given at
/// `--continue`, or at the start).
#[test]
fn a_resolution_that_takes_upstream_retires_the_overlay_with_drop_upstreamed() {
    let f = taken_upstream();
    let tree = f.root.join("target/bump/up");
    f.xtask(&["bump-pin", "main"]).code(1);
    std::fs::write(tree.join("a.txt"), f.read(f.upstream.join("a.txt"))).unwrap();
    let out = f.xtask(&["bump-pin", "--continue"]);
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/0001-Ten.patch: the resolved tree carries none of this overlay's changes
          help: if upstream now has all of it (you took the upstream side), `cargo xtask --root $TMP/project bump-pin --continue --drop-upstreamed` retires the overlay; else resolve the conflict in the tree so that it keeps the overlay's change
    "#]]
    .assert_eq(&out.snapshot());
    let out = f.xtask(&["bump-pin", "--continue", "--drop-upstreamed"]);
    expect![[r#"
        exit 0
        --- stdout
        bump-pin: up $PIN12 -> df2ca711d492
          conflict      0001-Ten.patch: dropped (upstreamed)
              the resolution is the new upstream's: retired (--drop-upstreamed)
        pinned up at df2ca711d492694d331c9f23406c1f93e5ec22d8; 3 file(s) written
        --- stderr
    "#]]
    .assert_eq(&out.snapshot());
    assert!(!f.root.join("overlays/up/0001-Ten.patch").exists());
    f.xtask(&["check"]).ok();

    let f = taken_upstream();
    f.xtask(&["bump-pin", "main", "--drop-upstreamed"]).code(1);
    let a = f.root.join("target/bump/up/a.txt");
    std::fs::write(&a, f.read(f.upstream.join("a.txt"))).unwrap();
    let out = f.xtask(&["bump-pin", "--continue"]).ok();
    assert!(out.stdout.contains("0001-Ten.patch: dropped"), "{}", out.stdout);
}

/// An RST document: its title's underline is a line of seven `=`.
const RST: &str = "Title\n=======\n\nintro line\n\nSection\n-------\n\nbody line\n";

/// K: a resolution holding a `=======` line that both sides have (an RST heading) is no conflict
/// marker; one the merge wrote is, until `--allow-markers` takes the tree as it is.
#[test]
fn marker_like_content_does_not_block_continue() {
    let f = Fixture::new(&[("doc.rst", RST)]);
    let fork = RST.replace("body line", "body line (fork)");
    f.add_overlay(
        "Doc",
        &[("doc.rst", Some(&fork))],
        "Overlay-Kind: local-only",
    );
    let up = RST.replace("body line", "body line (upstream)");
    f.commit_upstream(&[("doc.rst", &up)], "upstream: body");
    f.xtask(&["bump-pin", "main"]).code(1);
    let doc = f.root.join("target/bump/up/doc.rst");
    let merged = f.read(&doc);
    // A careless resolution keeps the merge's own `=======`: refused, naming it.
    let careless = merged
        .lines()
        .filter(|l| !l.starts_with("<<<<<<< ") && !l.starts_with(">>>>>>> "))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    std::fs::write(&doc, &careless).unwrap();
    let out = f.xtask(&["bump-pin", "--continue"]).code(2);
    assert!(
        out.stderr.contains("doc.rst:10") && out.stderr.contains("--allow-markers"),
        "{}",
        out.stderr
    );
    std::fs::write(&doc, RST.replace("body line", "body line (fork + upstream)")).unwrap();
    let out = f.xtask(&["bump-pin", "--continue"]).ok();
    assert!(out.stdout.contains("resolved by hand"), "{}", out.stdout);
}

/// K: `--allow-markers` takes a resolution whose marker-like lines are meant.
#[test]
fn allow_markers_takes_the_tree_as_it_is() {
    let f = Fixture::new(&[("doc.rst", RST)]);
    let fork = RST.replace("body line", "body line (fork)");
    f.add_overlay(
        "Doc",
        &[("doc.rst", Some(&fork))],
        "Overlay-Kind: local-only",
    );
    f.commit_upstream(
        &[("doc.rst", &RST.replace("body line", "body (upstream)"))],
        "upstream: body",
    );
    f.xtask(&["bump-pin", "main"]).code(1);
    let doc = f.root.join("target/bump/up/doc.rst");
    let meant = RST.replace("body line", "Body\n=======\n\nbody (fork)");
    std::fs::write(&doc, &meant).unwrap();
    f.xtask(&["bump-pin", "--continue"]).code(2);
    f.xtask(&["bump-pin", "--continue", "--allow-markers"]).ok();
    f.xtask(&["check"]).ok();
}
