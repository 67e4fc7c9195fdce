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
    let out = f
        .xtask(&["bump-pin", "--continue", "--drop-upstreamed"])
        .ok();
    assert!(
        out.stdout.contains("0002-Y.patch: dropped"),
        "{}",
        out.stdout
    );
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
    assert!(
        out.stdout.contains("0001-Ten.patch: dropped"),
        "{}",
        out.stdout
    );
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
    std::fs::write(
        &doc,
        RST.replace("body line", "body line (fork + upstream)"),
    )
    .unwrap();
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

/// Two overlays (a.txt line 10, b.txt) and an upstream commit that conflicts with both.
fn two_conflicts() -> Fixture {
    let f = Fixture::new(&[("a.txt", &twenty(0, "")), ("b.txt", "b\n")]);
    let kind = "Overlay-Kind: local-only";
    f.add_overlay("A", &[("a.txt", Some(&twenty(10, "TEN")))], kind);
    f.add_overlay("B", &[("b.txt", Some("B\n"))], kind);
    f.commit_upstream(
        &[
            ("a.txt", &twenty(10, "ten upstream")),
            ("b.txt", "b upstream\n"),
        ],
        "conflicts with both",
    );
    f
}

/// Starts the bump of [`two_conflicts`] and resolves the first conflict: `--continue` stops at
/// the second.
fn bump_to_the_second_conflict(f: &Fixture) {
    f.xtask(&["bump-pin", "main"]).code(1);
    resolve(&f.root.join("target/bump/up/a.txt"), "TEN upstream\n");
    let out = f.xtask(&["bump-pin", "--continue"]).code(1);
    assert!(out.stdout.contains("CONFLICT in b.txt"), "{}", out.stdout);
}

/// Resolves the second conflict and finishes; the first resolution is in overlay 0001.
#[track_caller]
fn finish_the_bump(f: &Fixture) {
    resolve(&f.root.join("target/bump/up/b.txt"), "B upstream\n");
    f.xtask(&["bump-pin", "--continue"]).ok();
    let first = f.read(f.root.join("overlays/up/0001-A.patch"));
    assert!(first.contains("+TEN upstream\n"), "{first}");
    f.xtask(&["check"]).ok();
}

/// B: the commands that write overlays, the series or the applied tree are refused while a bump
/// is in progress (exit 2, naming the bump and both ways out), nothing written; the bump then
/// finishes with its resolutions.
#[test]
fn writers_are_refused_while_a_bump_is_in_progress() {
    let f = two_conflicts();
    f.xtask(&["apply"]).ok();
    bump_to_the_second_conflict(&f);
    std::fs::write(f.root.join("target/apply/up/b.txt"), "B meanwhile\n").unwrap();
    let before = f.project_snapshot();
    let out = f.xtask(&["refresh"]);
    expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: a bump to ebd55376da46 is in progress in target/bump/up (resolving 0002-B.patch): finish it with `cargo xtask --root $TMP/project bump-pin --continue`, or abandon it with `cargo xtask --root $TMP/project bump-pin --abort`
          help: refresh would change overlays/ or the applied tree the bump started from; nothing was written. Finish the bump first (the resolutions so far are kept), then refresh at the new pin
    "#]]
    .assert_eq(&out.snapshot());
    let new = ["new-overlay", "0003-x", "--kind", "local-only", "-m", "x"];
    let copies = f.t().join("copies");
    std::fs::create_dir_all(&copies).unwrap();
    let import = ["import", copies.to_str().unwrap()];
    for args in [
        &new[..],
        &["apply"],
        &["apply", "--force"],
        &["canonicalize"],
        &import,
    ] {
        let out = f.xtask(args).code(2);
        assert!(
            out.stderr.contains("is in progress"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(before, f.project_snapshot(), "nothing was written");
    assert_eq!(
        f.read(f.root.join("target/apply/up/b.txt")),
        "B meanwhile\n"
    );
    finish_the_bump(&f);
}

/// N: a checkout moved mid-bump continues (the guards are project-relative).
#[test]
fn a_moved_checkout_continues_its_bump() {
    let mut f = two_conflicts();
    bump_to_the_second_conflict(&f);
    let moved = f.t().join("moved");
    std::fs::rename(&f.root, &moved).unwrap();
    f.root = moved;
    finish_the_bump(&f);
}

/// The bump state lives in `.overlay/` (git-ignored by its own `.gitignore`), so `cargo clean`
/// (target/ removed) loses no bump: `--continue` writes the conflict tree again, and the
/// resolutions made before are kept.
#[test]
fn a_bump_survives_cargo_clean() {
    let f = two_conflicts();
    bump_to_the_second_conflict(&f);
    assert_eq!(
        f.read(f.root.join(".overlay/.gitignore")).lines().last(),
        Some("*")
    );
    std::fs::remove_dir_all(f.root.join("target")).unwrap();
    let out = f.xtask(&["bump-pin", "--continue"]).code(1);
    assert!(
        out.stdout.contains("CONFLICT in b.txt") && out.stdout.contains("cargo clean"),
        "{}",
        out.stdout
    );
    finish_the_bump(&f);
    assert!(!f.root.join(".overlay/bump/up.json").exists());
}

/// A bump an earlier build stopped (its state inside the bump tree, its guards keyed by absolute
/// paths) still continues.
#[test]
fn a_bump_stopped_by_an_earlier_build_continues() {
    let f = two_conflicts();
    bump_to_the_second_conflict(&f);
    let state = f.root.join(".overlay/bump/up.json");
    let mut json: serde_json::Value = serde_json::from_str(&f.read(&state)).unwrap();
    let guards = json["guards"].as_object().unwrap().clone();
    let absolute: serde_json::Map<String, serde_json::Value> = guards
        .into_iter()
        .map(|(k, v)| (f.root.join(k).to_string_lossy().into_owned(), v))
        .collect();
    json["guards"] = absolute.into();
    json.as_object_mut().unwrap().remove("tree");
    let legacy = f.root.join("target/bump/up/.overlay-bump.json");
    std::fs::write(&legacy, serde_json::to_string(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(f.root.join(".overlay")).unwrap();
    finish_the_bump(&f);
    assert!(!legacy.exists());
}

/// bump-pin's error for a series that does not apply at the pin names no option bump-pin lacks
/// (drift's `--from`, once).
#[test]
fn a_series_broken_at_the_pin_is_explained_in_bump_pins_terms() {
    let f = Fixture::new(&[("a.txt", &twenty(0, ""))]);
    let name = f.add_overlay(
        "A",
        &[("a.txt", Some(&twenty(10, "TEN")))],
        "Overlay-Kind: local-only",
    );
    let p = f.root.join("overlays/up").join(name);
    std::fs::write(&p, f.read(&p).replace(" 9\n", " nine\n")).unwrap();
    f.commit_upstream(&[("b.txt", "b\n")], "unrelated");
    let out = f.xtask(&["bump-pin", "main"]).code(2);
    assert!(
        out.stderr.contains("does not apply at the starting commit"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("(the pin; for drift, its --from)"),
        "{}",
        out.stderr
    );
}

/// G: `rev` edited by hand to a commit that already has the overlay's change: check says
/// UPSTREAMED (not OFFSET → canonicalize), and canonicalize refuses to record the duplicate.
#[test]
fn a_hand_moved_pin_past_the_overlay_is_upstreamed_not_offset() {
    let base = "h1\nh2\nh3\nh4\nx1\nx2\nx3\ny1\ny2\ny3\nz1\nz2\nz3\nz4\n";
    let f = Fixture::new(&[("t.py", base)]);
    let added = base.replace("x3\n", "x3\nNEW\n");
    f.add_overlay("T", &[("t.py", Some(&added))], "Overlay-Kind: upstreamable");
    // Upstream merges it, and has the overlay's context once more below: the overlay applies
    // there (an offset), a second time.
    let merged = f.commit_upstream(&[("t.py", &format!("{added}{base}"))], "merge");
    let pins = f.root.join("pins.toml");
    std::fs::write(&pins, f.read(&pins).replace(&f.pin, &merged)).unwrap();
    let out = f.xtask(&["check"]).code(1);
    assert!(
        out.stdout.contains("UPSTREAMED") && !out.stdout.contains("OFFSET"),
        "{}",
        out.stdout
    );
    let before = f.project_snapshot();
    let out = f.xtask(&["canonicalize"]).code(2);
    assert!(
        out.stderr.contains("already upstream at the pin"),
        "{}",
        out.stderr
    );
    assert_eq!(before, f.project_snapshot());
    // apply refuses it too (it wrote the duplicate with exit 0): no tree is written.
    let dir = f.t().join("applied");
    let out = f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).code(2);
    assert!(
        out.stderr.contains("already upstream at the pin") && !dir.exists(),
        "{}",
        out.snapshot()
    );
}
