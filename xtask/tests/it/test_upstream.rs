//! `test-upstream`: argument handling and the refusals that come before any build (the real
//! run, which builds MLX, is exercised by `.ci/run`).

use crate::fixture::Fixture;

/// A suite or policy the command does not know is a usage error: exit 2, naming the choices.
#[test]
fn unknown_suite_or_policy_is_refused() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let out = f.xtask(&["test-upstream", "--suite", "rust"]).code(2);
    assert!(out.stderr.contains("cpp, python, all"), "{}", out.stderr);
    let out = f.xtask(&["test-upstream", "--policy", "fast"]).code(2);
    assert!(
        out.stderr.contains("upstream, streamed, both"),
        "{}",
        out.stderr
    );
}

/// A --python-test that is not a file name of python/tests is refused before anything runs.
#[test]
fn python_test_must_be_a_file_of_the_suite() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let out = f
        .xtask(&["test-upstream", "--json", "--python-test", "../evil.py"])
        .code(2);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("--python-test \"../evil.py\""),
        "{v}"
    );
}

/// Without the pinned doctest (and nanobind) sources the command says which table to add, as
/// JSON with --json, and exits 2 before building anything.
#[test]
fn missing_test_sources_name_the_table_to_add() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let out = f
        .xtask(&["test-upstream", "--json", "--suite", "cpp"])
        .code(2);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("pins.toml: no [upstream.up.sources.doctest]"),
        "{msg}"
    );
    assert!(out.stderr.contains("docs/testing.md"), "{}", out.stderr);
    assert!(!f.cache.join("builds").exists(), "nothing is built");
}
