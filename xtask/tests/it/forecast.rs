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

/// `new-overlay` prints one line per overlay it writes, however many edits went in; `--verbose`
/// keeps one line per edit.
#[test]
fn new_overlay_prints_one_line_per_overlay_written() {
    let f = Fixture::new(&[
        ("a.txt", &file("a", &[])),
        ("b.txt", &file("b", &[])),
        ("c.txt", &file("c", &[])),
    ]);
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["apply", "--dir", d]).ok();
    let edit = |name: &str, changes: &[(usize, &str)]| {
        std::fs::write(dir.join(format!("{name}.txt")), file(name, changes)).unwrap();
    };
    edit("a", &[(3, "A3"), (15, "A15"), (28, "A28")]);
    edit("b", &[(4, "B4"), (20, "B20")]);
    edit("c", &[(10, "C10")]);
    let args = |name: &'static str| {
        vec![
            "new-overlay",
            name,
            "--dir",
            d,
            "--kind",
            "local-only",
            "-m",
            "Many edits",
        ]
    };
    let out = f.xtask(&args("0001-many")).ok();
    assert_eq!(
        out.stdout,
        "created 0001-many.patch (appended to the series): 6 edit(s) in 3 file(s) of $TMP/tree\n"
    );
    f.xtask(&["check"]).ok();

    edit("a", &[(3, "A3"), (15, "A15"), (28, "A28"), (8, "A8")]);
    edit("c", &[(10, "C10"), (1, "C1")]);
    let mut verbose = args("0002-more");
    verbose.push("--verbose");
    let out = f.xtask(&verbose).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.len() == 4
            && lines[1].starts_with("  a.txt:8 -> 0002-more.patch")
            && lines[2].starts_with("  c.txt:1 -> 0002-more.patch")
            && lines[3] == "created 0002-more.patch (appended to the series)",
        "{}",
        out.stdout
    );
}

/// A C++ file: a functor whose call operator the overlay edits.
fn functor(op_first: &str, op_last: &str) -> String {
    let pad: String = (1..=8).map(|i| format!("    int p{i} = {i};\n")).collect();
    format!(
        "struct FloorDivide {{\n  int operator()(int a, int b) {{\n{op_first}{pad}{op_last}  }}\n}};\n"
    )
}

/// Upstream changes a line of `FloorDivide::operator()`, which sits inside `FloorDivide`: both are
/// watched (the hunk is in both), both changed, and the diff is printed once, under the outer.
#[test]
fn a_nested_definition_s_diff_is_printed_once() {
    let first = "    int q = a / b;\n";
    let last = "    return q;\n";
    let f = Fixture::new(&[("ops.h", &functor(first, last))]);
    f.add_overlay(
        "Floor it",
        &[(
            "ops.h",
            Some(&functor(
                first,
                "    return q - (a % b != 0 && (a < 0) != (b < 0));\n",
            )),
        )],
        "Overlay-Kind: upstreamable",
    );
    f.commit_upstream(
        &[("ops.h", &functor("    int q = (a) / b;\n", last))],
        "upstream edits the operator",
    );
    let out = f.xtask(&["drift", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let changes = v["overlays"][0]["symbol_changes"].as_array().unwrap();
    let names: Vec<(&str, &serde_json::Value)> = changes
        .iter()
        .map(|c| (c["symbol"].as_str().unwrap(), &c["diff_under"]))
        .collect();
    assert_eq!(
        names,
        [
            ("FloorDivide", &serde_json::Value::Null),
            ("FloorDivide::operator()", &serde_json::json!("FloorDivide")),
        ],
        "{v}"
    );
    // Both diffs stay in the JSON; the human report prints the diff once.
    assert!(changes.iter().all(|c| {
        c["diff"]
            .as_str()
            .unwrap()
            .contains("+    int q = (a) / b;")
    }));
    let out = f.xtask(&["drift"]).code(1);
    assert_eq!(
        out.stdout.matches("int q = (a) / b;").count(),
        1,
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("changed upstream: ops.h::FloorDivide::operator() (encloses hunk #1 of ops.h)\n        (its diff is shown under FloorDivide)"),
        "{}",
        out.stdout
    );
}

/// A hunk moved by one commit and turned into a conflict by a later one: its blame names both,
/// in order, the second as the one that broke it; commits elsewhere are not named.
#[test]
fn per_hunk_blame_names_every_commit_that_changed_the_hunk() {
    let f = Fixture::new(&[("a.txt", &file("a", &[])), ("b.txt", "b\n")]);
    f.add_overlay(
        "A fifteen",
        &[("a.txt", Some(&file("a", &[(15, "FIFTEEN")])))],
        "Overlay-Kind: upstreamable",
    );
    let top = |changes: &[(usize, &str)]| format!("new1\nnew2\n{}", file("a", changes));
    let a = f.commit_upstream(&[("a.txt", &top(&[]))], "A: two lines on top");
    f.commit_upstream(&[("b.txt", "B\n")], "elsewhere: another file");
    f.commit_upstream(
        &[("a.txt", &top(&[(29, "far below")]))],
        "elsewhere: far below",
    );
    let b = f.commit_upstream(
        &[(
            "a.txt",
            &top(&[(29, "far below"), (14, "fourteen upstream")]),
        )],
        "B: the line above",
    );
    let out = f.xtask(&["drift", "--per-commit", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let hunk = &v["overlays"][0]["hunks"][0];
    assert_eq!(hunk["status"], "conflict", "{v}");
    let blame: Vec<(&str, &serde_json::Value, &str, bool)> = hunk["blame"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["sha"].as_str().unwrap(),
                &b["changes"],
                b["status"].as_str().unwrap(),
                b["decisive"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        blame,
        [
            (a.as_str(), &serde_json::json!(["moved"]), "moved", false),
            (
                b.as_str(),
                &serde_json::json!(["context"]),
                "conflict",
                true
            ),
        ],
        "{v}"
    );
    // The overlay's own blame still names the commit of its final status.
    assert_eq!(v["overlays"][0]["blame"]["sha"], b.as_str(), "{v}");
    let out = f.xtask(&["drift", "--per-commit"]).code(1);
    let want = format!(
        "      a.txt hunk #1: conflict: {}\n        {} moved the hunk to other lines (the hunk is moved after it): A: two lines on top\n        {} changed the lines around the hunk (the hunk is in conflict after it; this commit broke it): B: the line above\n",
        hunk["reason"].as_str().unwrap(),
        &a[..12],
        &b[..12]
    );
    assert!(out.stdout.contains(&want), "{}\nwant:\n{want}", out.stdout);
    assert!(!out.stdout.contains("elsewhere"), "{}", out.stdout);
    // The walk says what it counted (issue 29, part 3: "2 evaluated" read cryptically).
    let head = out.stdout.lines().next().unwrap();
    assert!(
        head.ends_with(" (4 first-parent commit(s) walked; 3 of them changed a file the overlays touch or depend on, and only those were checked)"),
        "{head}"
    );
}

/// A commit that changes a definition the overlay depends on (`Depends-On`) is named in the
/// blame of each of its hunks, though the hunk itself still applies exactly.
#[test]
fn per_hunk_blame_names_a_change_to_a_dependency() {
    let src = |helper: &str, extra: &str| {
        let pad: String = (1..=10).map(|i| format!("  int p{i} = {i};\n")).collect();
        format!(
            "int helper(int x) {{\n{helper}}}\n\nint compute(int a) {{\n{pad}{extra}  return helper(a);\n}}\n"
        )
    };
    let f = Fixture::new(&[("lib.c", &src("  return x + 1;\n", ""))]);
    f.add_overlay(
        "Compute more",
        &[("lib.c", Some(&src("  return x + 1;\n", "  a += 1;\n")))],
        "Overlay-Kind: upstreamable\nDepends-On: lib.c::helper",
    );
    let c = f.commit_upstream(
        &[("lib.c", &src("  return x + 2;\n", ""))],
        "helper adds two",
    );
    let out = f.xtask(&["drift", "--per-commit", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["overlays"][0]["status"], "context-drift", "{v}");
    let hunk = &v["overlays"][0]["hunks"][0];
    assert_eq!(hunk["status"], "exact", "{v}");
    assert_eq!(
        hunk["blame"],
        serde_json::json!([{"sha": c, "subject": "helper adds two", "changes": ["symbol helper"], "status": "exact", "decisive": false}]),
        "{v}"
    );
    let out = f.xtask(&["drift", "--per-commit"]).code(1);
    assert!(
        out.stdout.contains(&format!(
            "      lib.c hunk #1: exact\n        {} changed helper (the hunk is exact after it): helper adds two\n",
            &c[..12]
        )),
        "{}",
        out.stdout
    );
}

/// Upstream moves the file (same name, another folder), then changes the hunk's context: the
/// move is no change to the context, the later edit is, and it broke the hunk.
#[test]
fn per_hunk_blame_follows_a_file_upstream_moved() {
    let f = Fixture::new(&[("a.txt", &file("a", &[]))]);
    f.add_overlay(
        "A fifteen",
        &[("a.txt", Some(&file("a", &[(15, "FIFTEEN")])))],
        "Overlay-Kind: upstreamable",
    );
    std::fs::create_dir_all(f.upstream.join("sub")).unwrap();
    f.git(&f.upstream, &["mv", "a.txt", "sub/a.txt"]);
    f.git(&f.upstream, &["commit", "-q", "-m", "move a"]);
    let moved = f.git(&f.upstream, &["rev-parse", "HEAD"]);
    let b = f.commit_upstream(
        &[("sub/a.txt", &file("a", &[(16, "sixteen upstream")]))],
        "the line below",
    );
    let out = f.xtask(&["drift", "--per-commit", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let hunk = &v["overlays"][0]["hunks"][0];
    assert_eq!(hunk["status"], "conflict", "{v}");
    let blame: Vec<(&str, &serde_json::Value, bool)> = hunk["blame"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["sha"].as_str().unwrap(),
                &b["changes"],
                b["decisive"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        blame,
        [
            (moved.as_str(), &serde_json::json!(["file moved"]), false),
            (b.as_str(), &serde_json::json!(["context"]), true),
        ],
        "{v}"
    );
}
