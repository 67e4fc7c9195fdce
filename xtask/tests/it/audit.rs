//! The resolution audit at `bump-pin --continue` (issue 24): a resolution that drops an earlier
//! overlay's lines or undoes upstream's change is refused (exit 2, the lines and their owners
//! named, nothing written) until `--accept-reverts`, which records the confirmation as trailers;
//! a resolution that keeps every line passes silently. Repro scripts A and L of
//! shared/repro/turn3 on a synthetic upstream.

use crate::fixture::Fixture;

fn lines(f: impl Fn(usize) -> String) -> String {
    (1..=20).map(f).collect()
}

fn plain(i: usize) -> String {
    format!("line {i}\n")
}

/// Upstream's a.c; overlay 0001 adds two lines after line 3; 0002 changes line 10; upstream then
/// changes line 10 too (`line 10 v2`): 0002 conflicts.
fn conflicting() -> (Fixture, String) {
    let f = Fixture::new(&[("a.c", &lines(plain))]);
    let with_0001 = |i: usize| match i {
        3 => "line 3\nmine_a();\nmine_b();\n".to_string(),
        _ => plain(i),
    };
    f.add_overlay(
        "Add mine",
        &[("a.c", Some(&lines(with_0001)))],
        "Overlay-Kind: local-only",
    );
    let with_0002 = |i: usize| match i {
        10 => "line 10 fork\n".to_string(),
        _ => with_0001(i),
    };
    f.add_overlay(
        "Fork line 10",
        &[("a.c", Some(&lines(with_0002)))],
        "Overlay-Kind: local-only",
    );
    let up = |i: usize| match i {
        10 => "line 10 v2\n".to_string(),
        _ => plain(i),
    };
    let new = f.commit_upstream(&[("a.c", &lines(up))], "upstream: line 10 v2");
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(out.stdout.contains("CONFLICT in a.c"), "{}", out.stdout);
    (f, new)
}

fn resolve(f: &Fixture, content: &str) {
    std::fs::write(f.root.join("target/bump/up/a.c"), content).unwrap();
}

#[test]
fn markers_say_what_each_side_is() {
    let (f, new) = conflicting();
    let merged = f.read(f.root.join("target/bump/up/a.c"));
    let pin = &f.pin[..9];
    assert!(
        merged.contains(&format!("<<<<<<< overlay 0002-Fork-line-10 at {pin}\n"))
            && merged.contains(&format!(
                ">>>>>>> new upstream {} + overlay 0001\n",
                &new[..9]
            )),
        "{merged}"
    );
}

#[test]
fn taking_new_upstream_and_redoing_the_change_drops_the_earlier_overlay() {
    let (f, _) = conflicting();
    // "Take the side labelled new upstream, redo the one-line change" on upstream's own file.
    let redo = |i: usize| match i {
        10 => "line 10 v2 fork\n".to_string(),
        _ => plain(i),
    };
    resolve(&f, &lines(redo));
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "--continue"]).code(2);
    assert!(
        out.stderr
            .contains("the resolution of 0002-Fork-line-10.patch loses lines")
            && out.stderr.contains(
                "a.c:4-5: drops 2 lines added by overlay 0001-Add-mine.patch: `mine_a();` …"
            )
            && out.stderr.contains("--accept-reverts")
            && out.stderr.contains("nothing was written"),
        "{}",
        out.stderr
    );
    assert_eq!(before, f.project_snapshot(), "nothing written");
    // Confirmed, the drop is recorded in the overlay, and check agrees.
    f.xtask(&["bump-pin", "--continue", "--accept-reverts"])
        .ok();
    let ov = f.read(f.root.join("overlays/up/0002-Fork-line-10.patch"));
    assert!(
        ov.contains("Overlay-Kind: local-only\nReverts-Overlay: 0001-Add-mine.patch\n---"),
        "{ov}"
    );
    f.xtask(&["check"]).ok();
    // Without the trailer, check names the drop (DROPS, exit 1).
    let p = f.root.join("overlays/up/0002-Fork-line-10.patch");
    std::fs::write(&p, ov.replace("Reverts-Overlay: 0001-Add-mine.patch\n", "")).unwrap();
    let out = f.xtask(&["check"]).code(1);
    assert!(
        out.stdout.contains("DROPS    0002-Fork-line-10.patch: a.c: lines 4-5: drops 2 lines added by overlay 0001-Add-mine.patch"),
        "{}",
        out.stdout
    );
}

#[test]
fn an_ours_resolution_undoes_upstreams_change_named_by_its_commit() {
    let (f, new) = conflicting();
    let ours = |i: usize| match i {
        3 => "line 3\nmine_a();\nmine_b();\n".to_string(),
        10 => "line 10 fork\n".to_string(),
        _ => plain(i),
    };
    resolve(&f, &lines(ours));
    let out = f.xtask(&["bump-pin", "--continue"]).code(2);
    let blamed = format!(
        "a.c:12: drops a line added or changed by upstream {} \"upstream: line 10 v2\": `line 10 v2`",
        &new[..12]
    );
    assert!(out.stderr.contains(&blamed), "{}", out.stderr);
    f.xtask(&["bump-pin", "--continue", "--accept-reverts"])
        .ok();
    let ov = f.read(f.root.join("overlays/up/0002-Fork-line-10.patch"));
    assert!(ov.contains(&format!("Reverts-Upstream: {new}\n")), "{ov}");
}

#[test]
fn a_resolution_that_keeps_every_line_passes_silently() {
    let (f, _) = conflicting();
    let both = |i: usize| match i {
        3 => "line 3\nmine_a();\nmine_b();\n".to_string(),
        10 => "line 10 v2 // fork\n".to_string(),
        _ => plain(i),
    };
    resolve(&f, &lines(both));
    let out = f.xtask(&["bump-pin", "--continue"]).ok();
    assert!(!out.stderr.contains("loses"), "{}", out.stderr);
    let ov = f.read(f.root.join("overlays/up/0002-Fork-line-10.patch"));
    assert!(!ov.contains("Reverts-"), "{ov}");
    f.xtask(&["check"]).ok();
}
