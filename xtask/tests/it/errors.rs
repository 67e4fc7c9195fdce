//! The one error shape, decided in one place (`overlay_cli::CliError`): every command's failure
//! is `{"schema": 1, "error", "kind", "hint"?}` on stdout under `--json`, `error: …` on stderr,
//! exit 2 (docs/json.md).

use crate::fixture::Fixture;

fn json_error(f: &Fixture, args: &[&str]) -> serde_json::Value {
    let out = f.xtask(args).code(2);
    assert!(
        out.stderr.starts_with("error: "),
        "{args:?}: {}",
        out.stderr
    );
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout))
}

/// test-upstream printed `{"error": …}` without the schema (a second shape); its refusals are
/// build-kind errors in the one shape now.
#[test]
fn test_upstream_errors_have_the_one_shape() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let v = json_error(
        &f,
        &["test-upstream", "--json", "--python-test", "../evil.py"],
    );
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["kind"], "build", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("--python-test \"../evil.py\""),
        "{v}"
    );
}

/// An engine refusal keeps its whole message (file, line, help) in `error`, says it is bad input
/// in `kind`, and gives its `help:` text alone in `hint`.
#[test]
fn engine_refusals_carry_their_kind_and_hint() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let v = json_error(&f, &["bump-pin", "no-such-rev", "--json"]);
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["kind"], "input", "{v}");
    let error = v["error"].as_str().unwrap();
    let hint = v["hint"].as_str().expect("a hint");
    assert!(error.contains("\"no-such-rev\": no such commit"), "{v}");
    assert!(error.ends_with(&format!("help: {hint}")), "{v}");
    // A plain refusal without help has no hint.
    let v = json_error(
        &f,
        &[
            "build-mlx",
            "--backend",
            "cpu",
            "--bundle",
            "x.tar.gz",
            "--json",
        ],
    );
    assert_eq!(v["schema"], 1, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("--bundle builds the CUDA backend only"),
        "{v}"
    );
    assert_eq!(v["hint"], "add --backend cuda", "{v}");
}
