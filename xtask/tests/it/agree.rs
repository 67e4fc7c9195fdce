//! drift and bump-pin share one classification: on every case here both are run and must agree
//! (a conflict in one is a conflict in the other, a review stop stops the bump, an overlay after a
//! conflict is blocked by it, not a conflict of its own).

use crate::fixture::Fixture;

/// A C file: `helper`, then a long `compute` that calls it (padding keeps hunks apart).
fn lib(helper: &str, helper_body: &str, compute_first: &str) -> String {
    let pad: String = (1..=12).map(|i| format!("  int p{i} = {i};\n")).collect();
    format!(
        "int {helper}(int x) {{\n  int y = x;\n{helper_body}  return y + 1;\n}}\n\nint compute(int a) {{\n{compute_first}{pad}  return {helper}(b);\n}}\n"
    )
}

const BODY: &str = "  y += 2;\n  y += 3;\n  y += 4;\n";
const FIRST: &str = "  int b = a * 2;\n";

fn fixture(overlay_body: &str, overlay_first: &str) -> Fixture {
    let f = Fixture::new(&[("src/lib.c", &lib("helper", BODY, FIRST))]);
    f.add_overlay(
        "Tune compute",
        &[(
            "src/lib.c",
            Some(&lib("helper", overlay_body, overlay_first)),
        )],
        "Overlay-Kind: upstreamable\nDepends-On: src/lib.c::helper",
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

#[track_caller]
fn drift_json(f: &Fixture, code: i32) -> serde_json::Value {
    let out = f.xtask(&["drift", "--json"]).code(code);
    serde_json::from_str(&out.stdout).unwrap()
}

/// Upstream renames `helper` (definition and call): the overlay's `Depends-On` is gone.
fn rename_helper(f: &Fixture, body: &str) -> String {
    f.commit_upstream(
        &[("src/lib.c", &lib("unpack_bits", body, FIRST))],
        "rename helper",
    )
}

#[test]
fn a_removed_dependency_stops_the_bump_for_review_and_says_removed() {
    // The overlay's hunk is in compute, not inside the removed helper (repro 03).
    let f = fixture(BODY, "  int b = a * 3;\n");
    let new = rename_helper(&f, BODY);
    let v = drift_json(&f, 1);
    let o = &v["overlays"][0];
    assert_eq!(o["status"], "review", "{v}");
    let removed: Vec<&str> = o["symbol_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["removed"] == true)
        .map(|c| c["symbol"].as_str().unwrap())
        .collect();
    assert_eq!(removed, ["helper"], "{v}");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        out.stdout
            .contains("review: upstream removed src/lib.c::helper (Depends-On)")
            && !out.stdout.contains("changed src/lib.c::helper"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("STOPPED for review"), "{}", out.stdout);
    assert_eq!(before, f.project_snapshot(), "pin and overlays untouched");
    assert_ne!(pins_rev(&f), new);

    // Reviewed (nothing to change): --continue carries it and drops the dead trailer, saying so.
    let out = f.xtask(&["bump-pin", "--continue"]).ok();
    assert!(
        out.stdout
            .contains("dropped `Depends-On: src/lib.c::helper`"),
        "{}",
        out.stdout
    );
    assert_eq!(pins_rev(&f), new);
    let patch = f.read(f.root.join("overlays/up/0001-Tune-compute.patch"));
    assert!(!patch.contains("Depends-On"), "{patch}");
    f.xtask(&["check"]).ok();
    f.xtask(&["drift", "--to", &new]).ok();
}

#[test]
fn a_removed_dependency_with_the_hunk_inside_never_moves_the_pin() {
    // The overlay's hunk sits inside helper, which upstream renames (repro 03b): drift and bump
    // agree (review, exit 1) and the pin stays.
    let f = fixture("  y += 2;\n  // fork: note\n  y += 3;\n  y += 4;\n", FIRST);
    let new = rename_helper(&f, BODY);
    let v = drift_json(&f, 1);
    assert_eq!(v["overlays"][0]["status"], "review", "{v}");
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        out.stdout.contains("review") && out.stdout.contains("STOPPED for review"),
        "{}",
        out.stdout
    );
    assert_ne!(pins_rev(&f), new, "the pin must not move");
    // The merged tree is there for review.
    let merged = f.read(f.root.join("target/bump/up/src/lib.c"));
    assert!(
        merged.contains("int unpack_bits(") && merged.contains("// fork: note"),
        "{merged}"
    );
}

fn lines(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

#[test]
fn overlays_after_a_conflict_are_blocked_by_it_not_conflicts_of_their_own() {
    let f = Fixture::new(&[("a.txt", &lines(|i| format!("l{i}\n"))), ("b.txt", "b\n")]);
    let one = |i: usize| {
        if i == 10 {
            "TEN\n".into()
        } else {
            format!("l{i}\n")
        }
    };
    f.add_overlay(
        "Change 10",
        &[("a.txt", Some(&lines(one)))],
        "Overlay-Kind: upstreamable",
    );
    // Written on top of the first: its context holds line 10 as the first overlay left it.
    f.add_overlay(
        "Change 12",
        &[(
            "a.txt",
            Some(&lines(|i| match i {
                12 => "TWELVE\n".into(),
                _ => one(i),
            })),
        )],
        "Overlay-Kind: upstreamable",
    );
    f.add_overlay(
        "Change b",
        &[("b.txt", Some("B\n"))],
        "Overlay-Kind: local-only",
    );
    f.commit_upstream(
        &[(
            "a.txt",
            &lines(|i| match i {
                10 => "ten upstream\n".into(),
                _ => format!("l{i}\n"),
            }),
        )],
        "conflicting edit",
    );
    let v = drift_json(&f, 1);
    let st: Vec<&str> = (0..3)
        .map(|i| v["overlays"][i]["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["conflict", "blocked", "clean"], "{v}");
    assert_eq!(
        v["overlays"][1]["blocked_by"], "0001-Change-10.patch",
        "{v}"
    );
    let out = f.xtask(&["drift"]).code(1);
    assert!(
        out.stdout.contains("blocked by 0001-Change-10.patch"),
        "{}",
        out.stdout
    );
    let out = f.xtask(&["bump-pin", "main", "--dry-run"]).code(1);
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert!(
        row("0001-Change-10").starts_with("conflict"),
        "{}",
        out.stdout
    );
    // The dry run forecasts past the conflict (issue 18): the blocked overlay is evaluated on the
    // conflicting one's side and says it depends on that resolution.
    assert!(
        row("0002-Change-12").starts_with("blocked")
            && row("0002-Change-12").ends_with(": kept")
            && out
                .stdout
                .contains("depends on the resolution of 0001-Change-10.patch"),
        "{}",
        out.stdout
    );
    assert!(
        row("0003-Change-b").starts_with("clean") && row("0003-Change-b").ends_with(": kept"),
        "{}",
        out.stdout
    );
    let out = f
        .xtask(&["bump-pin", "main", "--dry-run", "--json"])
        .code(1);
    let bump: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    crate::forecast::assert_agree(&v, &bump);
    // The real bump still stops at the conflict: what follows is not reached.
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        out.stdout
            .contains("not reached (blocked by 0001-Change-10.patch)"),
        "{}",
        out.stdout
    );
}

/// Upstream takes one of the overlay's two hunks: drift says review (partially upstreamed), the
/// bump stops with the merge in the bump tree, and `--continue` carries what is left.
#[test]
fn a_partly_upstreamed_overlay_stops_for_review_then_continue_carries_the_rest() {
    let f = Fixture::new(&[("a.txt", &lines(|i| format!("l{i}\n")))]);
    let two = |i: usize| match i {
        5 => "FIVE\n".to_string(),
        25 => "TWENTY-FIVE\n".to_string(),
        _ => format!("l{i}\n"),
    };
    f.add_overlay(
        "Two changes",
        &[("a.txt", Some(&lines(two)))],
        "Overlay-Kind: upstreamable",
    );
    let new = f.commit_upstream(
        &[(
            "a.txt",
            &lines(|i| {
                if i == 5 {
                    "FIVE\n".into()
                } else {
                    format!("l{i}\n")
                }
            }),
        )],
        "take the first",
    );
    let v = drift_json(&f, 1);
    assert_eq!(v["overlays"][0]["status"], "review", "{v}");
    assert_eq!(v["overlays"][0]["partially_upstreamed"], true, "{v}");
    let before = f.project_snapshot();
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(
        out.stdout.contains("STOPPED for review")
            && out.stdout.contains("a.txt hunk #1 is already upstream")
            && out.stdout.contains("update its Upstream-Status"),
        "{}",
        out.stdout
    );
    assert_eq!(before, f.project_snapshot());
    assert_eq!(f.read(f.root.join("target/bump/up/a.txt")), lines(two));
    let out = f.xtask(&["bump-pin", "--continue"]).ok();
    assert!(out.stdout.contains("resolved by hand"), "{}", out.stdout);
    assert_eq!(pins_rev(&f), new);
    let patch = f.read(f.root.join("overlays/up/0001-Two-changes.patch"));
    assert!(
        patch.contains("+TWENTY-FIVE") && !patch.contains("+FIVE"),
        "{patch}"
    );
    f.xtask(&["check"]).ok();
    f.xtask(&["drift", "--to", &new]).ok();
}

/// A C file with `g` (its body `g_body`) and a long `h` (its first line `h_first`).
fn gh(g_body: &str, h_first: &str) -> String {
    let pad: String = (1..=8).map(|i| format!("  int q{i} = {i};\n")).collect();
    format!(
        "int g(int x) {{\n{g_body}  return x;\n}}\n\n{pad_fn}int h(int a) {{\n{h_first}{pad}  return a;\n}}\n",
        pad_fn = (1..=6).map(|i| format!("int k{i};\n")).collect::<String>()
    )
}

/// Issue 24: an overlay copied from upstream at a commit after the pin (`Base:` records it)
/// carries upstream's own work from the pin to that commit. Drift and bump-pin judged it from
/// the pin: that work, upstream at the target too, read as "partly upstreamed" (a review stop)
/// and as upstream changing `g`. Judged from its base, it is carried without a stop.
#[test]
fn an_overlay_based_after_the_pin_is_judged_from_its_base() {
    let (g0, g1) = ("  x += 1;\n", "  x += 2; /* upstream */\n");
    let f = Fixture::new(&[("src/f.c", &gh(g0, "  int b = a;\n")), ("README", "r\n")]);
    let base = f.commit_upstream(&[("src/f.c", &gh(g1, "  int b = a;\n"))], "g: add 2");
    let copy = gh(g1, "  int b = a * 3; /* fork */\n");
    f.add_overlay(
        "Tune h",
        &[("src/f.c", Some(&copy))],
        &format!("Overlay-Kind: upstreamable\nBase: {base}"),
    );
    let new = f.commit_upstream(&[("README", "r2\n")], "readme");
    let v = drift_json(&f, 0);
    let o = &v["overlays"][0];
    assert_eq!(o["status"], "moved", "{v}");
    assert_eq!(o["partially_upstreamed"], false, "{v}");
    assert_eq!(o["changed_symbols"], serde_json::json!([]), "{v}");
    assert_eq!(o["hunks"][0]["status"], "upstreamed", "{v}");
    let out = f.xtask(&["bump-pin", "main"]).ok();
    assert!(out.stdout.contains("rewritten"), "{}", out.stdout);
    assert_eq!(pins_rev(&f), new);
    let patch = f.read(f.root.join("overlays/up/0001-Tune-h.patch"));
    assert!(
        patch.contains("+  int b = a * 3; /* fork */") && !patch.contains("/* upstream */"),
        "{patch}"
    );
    f.xtask(&["apply"]).ok();
    assert_eq!(f.read(f.root.join("target/apply/up/src/f.c")), copy);
}

/// Issue 24: an overlay after a conflict in its file is `blocked`, with the conflict's blame
/// only; that its own `Depends-On` changed upstream in another commit went unsaid, though the dry
/// run evaluates it. drift's `forecast` says it, evaluated on the conflicting overlay's side.
#[test]
fn a_blocked_overlay_carries_its_forecast_on_the_conflicting_side() {
    let f = Fixture::new(&[("src/lib.c", &lib("helper", BODY, FIRST))]);
    let three = "  int b = a * 3;\n";
    f.add_overlay(
        "Triple b",
        &[("src/lib.c", Some(&lib("helper", BODY, three)))],
        "Overlay-Kind: upstreamable",
    );
    let tuned = lib("helper", BODY, three).replace("int p10 = 10;", "int p10 = 100;");
    f.add_overlay(
        "Tune p10",
        &[("src/lib.c", Some(&tuned))],
        "Overlay-Kind: upstreamable\nDepends-On: src/lib.c::helper",
    );
    let five = f.commit_upstream(
        &[("src/lib.c", &lib("helper", BODY, "  int b = a * 5;\n"))],
        "five",
    );
    let body = BODY.replace("y += 3;", "y += 33;");
    f.commit_upstream(
        &[("src/lib.c", &lib("helper", &body, "  int b = a * 5;\n"))],
        "helper: 33",
    );
    let v = f.xtask(&["drift", "--json", "--per-commit"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&v.stdout).unwrap();
    let o = &v["overlays"][1];
    assert_eq!(o["status"], "blocked", "{v}");
    assert_eq!(o["blocked_by"], "0001-Triple-b.patch", "{v}");
    assert_eq!(o["forecast"]["status"], "context-drift", "{v}");
    let syms = o["forecast"]["changed_symbols"].as_array().unwrap();
    assert!(syms.iter().any(|s| s == "helper"), "{v}");
    // Context drift since `five` changed compute, around its hunk; `helper` changed after.
    assert_eq!(o["forecast"]["blame"]["sha"], five.as_str(), "{v}");
    assert!(
        v["overlays"][0].get("forecast").is_none(),
        "only a blocked overlay has one: {v}"
    );
    let out = f.xtask(&["drift"]).code(1);
    assert!(
        out.stdout
            .contains("forecast on 0001-Triple-b.patch's side (ours): context-drift")
            && out.stdout.contains("changed upstream: ")
            && out.stdout.contains("helper"),
        "{}",
        out.stdout
    );
    // The dry run carries it on the same side: it is not a conflict there either.
    let out = f.xtask(&["bump-pin", "main", "--dry-run"]).code(1);
    let row = out
        .stdout
        .lines()
        .find(|l| l.contains("0002-Tune-p10"))
        .unwrap();
    assert!(
        row.trim_start().starts_with("blocked") && !row.contains("CONFLICT"),
        "{}",
        out.stdout
    );
}
