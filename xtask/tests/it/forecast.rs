//! `bump-pin --dry-run` forecasts every conflict (issue 18 item 3), per-hunk blame (item 4),
//! a quiet `new-overlay` (item 5) and one diff per changed definition in drift (item 5).

use crate::fixture::Fixture;

fn lines(f: impl Fn(usize) -> String) -> String {
    (1..=30).map(f).collect()
}

/// `name`'s lines 1..=30, with `changes` (line -> text) applied.
fn file(name: &str, changes: &[(usize, &str)]) -> String {
    lines(|i| match changes.iter().find(|(l, _)| *l == i) {
        Some((_, t)) => format!("{t}\n"),
        None => format!("{name}{i}\n"),
    })
}

/// drift's status and bump-pin's outcome agree, overlay by overlay: a conflict is a conflict of
/// its own (no dependency), a blocked overlay depends on the resolution of the one that blocks
/// it, upstreamed is upstreamed, review stops, everything else is carried.
#[track_caller]
pub fn assert_agree(drift: &serde_json::Value, bump: &serde_json::Value) {
    let d = drift["overlays"].as_array().unwrap();
    let b = bump["overlays"].as_array().unwrap();
    assert_eq!(d.len(), b.len(), "{drift}\n{bump}");
    for (d, b) in d.iter().zip(b) {
        let (status, action) = (d["status"].as_str().unwrap(), b["action"].as_str().unwrap());
        let dep = &b["depends_on_resolution_of"];
        let ok = match status {
            "blocked" => *dep == d["blocked_by"] && action != "pending",
            "conflict" => action == "conflict" && dep.is_null(),
            "upstreamed" => matches!(action, "upstreamed" | "dropped") && dep.is_null(),
            "review" => action == "review" && dep.is_null(),
            _ => matches!(action, "kept" | "rewritten") && dep.is_null(),
        };
        assert!(ok, "{}: drift {status}, bump {action} {dep}", d["name"]);
    }
}

/// Five overlays on three files; upstream changes what two of them change.
fn several_conflicts() -> (Fixture, String) {
    let f = Fixture::new(&[
        ("a.txt", &file("a", &[])),
        ("b.txt", &file("b", &[])),
        ("c.txt", &file("c", &[])),
    ]);
    let t = "Overlay-Kind: upstreamable";
    f.add_overlay("A ten", &[("a.txt", Some(&file("a", &[(10, "TEN")])))], t);
    // Written on top of the first: its context holds line 10 as the first left it.
    let a = file("a", &[(10, "TEN"), (12, "TWELVE")]);
    f.add_overlay("A twelve", &[("a.txt", Some(&a))], t);
    f.add_overlay("B five", &[("b.txt", Some(&file("b", &[(5, "FIVE")])))], t);
    f.add_overlay("C twenty", &[("c.txt", Some(&file("c", &[(20, "XX")])))], t);
    let b = file("b", &[(5, "FIVE"), (25, "TWENTY-FIVE")]);
    f.add_overlay("B twenty-five", &[("b.txt", Some(&b))], t);
    let new = f.commit_upstream(
        &[
            ("a.txt", &file("a", &[(10, "ten upstream")])),
            (
                "b.txt",
                &file("b", &[(5, "five upstream"), (25, "25 upstream")]),
            ),
        ],
        "upstream edits a and b",
    );
    (f, new)
}

#[test]
fn a_dry_run_crosses_every_conflict_and_marks_what_depends_on_a_resolution() {
    let (f, new) = several_conflicts();
    let before = f.project_snapshot();
    let out = f.xtask(&["drift", "--json"]).code(1);
    let drift: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let st: Vec<&str> = (0..5)
        .map(|i| drift["overlays"][i]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        st,
        ["conflict", "blocked", "conflict", "clean", "blocked"],
        "{drift}"
    );

    let out = f
        .xtask(&["bump-pin", "main", "--dry-run", "--json"])
        .code(1);
    let bump: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let actions: Vec<&str> = (0..5)
        .map(|i| bump["overlays"][i]["action"].as_str().unwrap())
        .collect();
    // 0002 carries cleanly on 0001's side; 0005 conflicts even on 0003's side (upstream also
    // changed line 25), and says whose resolution that assumes.
    assert_eq!(
        actions,
        ["conflict", "kept", "conflict", "kept", "conflict"],
        "{bump}"
    );
    let deps: Vec<&serde_json::Value> = (0..5)
        .map(|i| &bump["overlays"][i]["depends_on_resolution_of"])
        .collect();
    assert_eq!(
        deps,
        [
            &serde_json::Value::Null,
            &serde_json::json!("0001-A-ten.patch"),
            &serde_json::Value::Null,
            &serde_json::Value::Null,
            &serde_json::json!("0003-B-five.patch"),
        ],
        "{bump}"
    );
    assert_eq!(bump["schema"], 1);
    assert_agree(&drift, &bump);

    let out = f.xtask(&["bump-pin", "main", "--dry-run"]).code(1);
    let row = |name: &str| {
        let l: Vec<&str> = out.stdout.lines().collect();
        let i = l.iter().position(|l| l.contains(name)).unwrap();
        (
            l[i].trim().to_string(),
            l.get(i + 1).unwrap_or(&"").trim().to_string(),
        )
    };
    assert!(
        row("0001-A-ten").0.contains("CONFLICT in a.txt"),
        "{}",
        out.stdout
    );
    assert!(
        row("0003-B-five").0.contains("CONFLICT in b.txt"),
        "{}",
        out.stdout
    );
    assert!(
        row("0005-B-twenty-five").0.contains("CONFLICT in b.txt")
            && row("0005-B-twenty-five").1.starts_with(
                "depends on the resolution of 0003-B-five.patch: forecast on that overlay's side"
            ),
        "{}",
        out.stdout
    );
    assert!(
        row("0002-A-twelve").0.starts_with("blocked")
            && row("0002-A-twelve").0.ends_with(": kept")
            && row("0002-A-twelve")
                .1
                .starts_with("depends on the resolution of 0001-A-ten.patch"),
        "{}",
        out.stdout
    );
    assert!(row("0004-C-twenty").0.ends_with(": kept"), "{}", out.stdout);
    assert!(!out.stdout.contains("not reached"), "{}", out.stdout);
    assert_eq!(before, f.project_snapshot(), "a dry run writes nothing");
    assert!(!f.root.join("target/bump").exists(), "nor a bump tree");

    // The real bump stops at the first conflict, as before.
    let out = f.xtask(&["bump-pin", "main"]).code(1);
    assert!(out.stdout.contains("CONFLICT in a.txt"), "{}", out.stdout);
    let not_reached = out.stdout.matches("not reached").count();
    assert_eq!(not_reached, 4, "{}", out.stdout);
    assert!(
        !out.stdout.contains("depends on the resolution"),
        "{}",
        out.stdout
    );
    let bumped = f.read(f.root.join("target/bump/up/a.txt"));
    assert!(bumped.contains("<<<<<<< overlay"), "{bumped}");
    assert!(f.read(f.root.join("pins.toml")).contains(&f.pin));
    assert!(!f.read(f.root.join("pins.toml")).contains(&new));
}

/// Upstream deletes the file an overlay changes, and a later overlay changes it again: the
/// forecast keeps the overlay's file (its side) and carries the later one on it.
#[test]
fn a_file_deleted_upstream_is_forecast_on_the_overlays_side() {
    let f = Fixture::new(&[("a.txt", &file("a", &[])), ("keep.txt", "k\n")]);
    let t = "Overlay-Kind: upstreamable";
    f.add_overlay("A ten", &[("a.txt", Some(&file("a", &[(10, "TEN")])))], t);
    let a = file("a", &[(10, "TEN"), (20, "TWENTY")]);
    f.add_overlay("A twenty", &[("a.txt", Some(&a))], t);
    f.git(&f.upstream, &["rm", "-q", "a.txt"]);
    f.git(&f.upstream, &["commit", "-q", "-m", "drop a"]);
    let drift: serde_json::Value =
        serde_json::from_str(&f.xtask(&["drift", "--json"]).code(1).stdout).unwrap();
    let out = f
        .xtask(&["bump-pin", "main", "--dry-run", "--json"])
        .code(1);
    let bump: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(bump["overlays"][0]["action"], "conflict", "{bump}");
    assert_eq!(bump["overlays"][1]["action"], "kept", "{bump}");
    assert_eq!(
        bump["overlays"][1]["depends_on_resolution_of"], "0001-A-ten.patch",
        "{bump}"
    );
    assert_agree(&drift, &bump);
}
