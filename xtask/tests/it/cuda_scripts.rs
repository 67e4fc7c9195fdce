//! The GPU machine's scripts that can run without a GPU: `cuda/bundle/control.sh` (the bundle's
//! tree taken back to the pin, checked blob by blob), `cuda/bundle/failures.py` (a policy's
//! failing subtests against the control's), `cuda/bench/collect.py` (a run's results JSON),
//! `cuda/bench/marlin_bench.cu`'s shapes against `peers.py`'s, `cuda/machine/gpu-session.sh`'s
//! unpack without its bundle and its `invariant` phase's benchmark modes (a stand-in harness),
//! `cuda/harness/build.sh` with a stand-in nvcc, `cuda/harness/sass_mix.py` on a small dump,
//! `cuda/bench/raw_jsonl.py` (a call's raw records behind its machine's line) and
//! `cuda/machine/ninja_times.py` (where a build's time went).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture::{Fixture, Out, files_under, workspace};

/// `int a;`, then `b_line`, then ten more declarations: long enough that an edit at its end is
/// outside every hunk's context.
fn lib_c(b_line: &str) -> String {
    let tail: String = (0..10).map(|i| format!("int f{i};\n")).collect();
    format!("int a;\n{b_line}\n{tail}")
}

/// A fixture at `lib_c("int b;")`, for [`bundle_with_control`].
fn fixture() -> Fixture {
    Fixture::new(&[("src/lib.c", &lib_c("int b;"))])
}

/// A bundle of a fixture whose series changes one file twice and adds another, with the project's
/// real control.sh in it; returns the unpacked bundle folder. It is unpacked inside a git work
/// tree, where a plain `git apply` would take its paths from that repository's top and skip them.
fn bundle_with_control(f: &Fixture) -> PathBuf {
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some(&lib_c("long b;")))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    f.add_overlay(
        "Add a helper",
        &[
            ("src/helper.c", Some("int helper;\n")),
            ("src/lib.c", Some(&lib_c("long b;\nint helper_used;"))),
        ],
        "Overlay-Kind: local-only\nUpstream-Status: not-submitted\n",
    );
    pack_bundle(f)
}

/// The fixture's series packed as a bundle with the project's real control.sh, unpacked inside a
/// git work tree; returns the unpacked bundle folder.
fn pack_bundle(f: &Fixture) -> PathBuf {
    let bundle_dir = f.root.join("cuda/bundle");
    std::fs::create_dir_all(&bundle_dir).unwrap();
    std::fs::write(bundle_dir.join("build.sh"), "echo build\n").unwrap();
    std::fs::copy(
        workspace().join("cuda/bundle/control.sh"),
        bundle_dir.join("control.sh"),
    )
    .unwrap();
    let archive = f.t().join("b.tar.gz");
    let archive_arg = archive.to_str().unwrap();
    f.xtask(&["build-mlx", "--backend", "cuda", "--bundle", archive_arg])
        .ok();
    let repo = f.t().join("checkout");
    std::fs::create_dir_all(&repo).unwrap();
    f.git(&repo, &["init", "-q"]);
    f.unpack_bundle(&archive, "checkout/unpacked")
}

fn control(f: &Fixture, bundle: &Path, args: &[&str]) -> Out {
    let out = Command::new("bash")
        .arg(bundle.join("cuda/bundle/control.sh"))
        .arg(f.root.join("overlays/up"))
        .args(args)
        .env("NO_BUILD", "1")
        .output()
        .unwrap();
    f.out(out)
}

/// Reverting gives the pin's tree exactly (the added file gone), the check counts every touched
/// file, and `--forward` gives the bundle's patched tree back.
#[test]
fn control_takes_the_bundle_back_to_the_pin_and_forward_again() {
    let f = fixture();
    let b = bundle_with_control(&f);
    let patched = files_under(&b.join("mlx"), &[]);
    let out = control(&f, &b, &[]).ok();
    assert!(
        out.stdout
            .contains("control: 2 of 2 touched files are the pin's"),
        "{}",
        out.snapshot()
    );
    assert_eq!(f.read(b.join("mlx/src/lib.c")), lib_c("int b;"));
    assert!(!b.join("mlx/src/helper.c").exists());
    control(&f, &b, &["--forward"]).ok();
    assert_eq!(files_under(&b.join("mlx"), &[]), patched);
}

/// Names git writes C-quoted (a non-ASCII letter) or ends with a tab (a space) are read as the
/// names they are: every touched file is counted (a hunk line removing `-- c` is not a header),
/// and an edited one is named.
#[test]
fn control_reads_the_names_git_quotes() {
    let cafe = "src/caf\u{e9}.c";
    let f = Fixture::new(&[("src/lib.c", &lib_c("int b;")), (cafe, &lib_c("-- c"))]);
    f.add_overlay(
        "Odd names",
        &[
            ("src/with space.c", Some("int s;\n")),
            (cafe, Some(&lib_c("int c;"))),
        ],
        "Overlay-Kind: local-only\nUpstream-Status: not-submitted\n",
    );
    let b = pack_bundle(&f);
    let patched = files_under(&b.join("mlx"), &[]);
    let out = control(&f, &b, &[]).ok();
    assert!(
        out.stdout
            .contains("control: 2 of 2 touched files are the pin's"),
        "{}",
        out.snapshot()
    );
    assert!(!b.join("mlx/src/with space.c").exists());
    assert_eq!(f.read(b.join("mlx").join(cafe)), lib_c("-- c"));
    control(&f, &b, &["--forward"]).ok();
    assert_eq!(files_under(&b.join("mlx"), &[]), patched);
    let edited = f
        .read(b.join("mlx").join(cafe))
        .replace("int f9;", "int f9; // edited");
    std::fs::write(b.join("mlx").join(cafe), edited).unwrap();
    let out = control(&f, &b, &[]).code(1);
    assert!(
        out.stderr.contains(&format!("control: {cafe}: ")),
        "{}",
        out.snapshot()
    );
}

/// A series file that lists nothing, or an argument it does not know, is refused (exit 2) with the
/// tree untouched.
#[test]
fn control_refuses_an_empty_series_and_unknown_arguments() {
    let f = fixture();
    let b = bundle_with_control(&f);
    let before = files_under(&b.join("mlx"), &[]);
    let out = control(&f, &b, &["--backward"]).code(2);
    assert!(
        out.stderr.contains("unknown argument --backward"),
        "{}",
        out.snapshot()
    );
    let series = f.root.join("overlays/up/series");
    std::fs::write(&series, "# nothing yet\n").unwrap();
    let out = control(&f, &b, &[]).code(2);
    assert!(
        out.stderr.contains("lists no overlay"),
        "{}",
        out.snapshot()
    );
    std::fs::remove_file(&series).unwrap();
    let out = control(&f, &b, &[]).code(2);
    assert!(
        out.stderr.contains("series: no such file"),
        "{}",
        out.snapshot()
    );
    assert_eq!(files_under(&b.join("mlx"), &[]), before);
}

/// A subtest pytest-timeout stopped midway is "interrupted", not a failure (exit 0 when nothing else
/// fails); a failure in a test the control never ran is named as such, and is still the overlays'
/// until shown otherwise (exit 1).
#[test]
fn failures_sets_interrupted_subtests_apart() {
    let f = Fixture::new(&[("a", "a\n")]);
    let t = f.t();
    let a = "shape='(32, 128, 128)', group_size='128'";
    let pin = pytest_log(t, "pin.log", &[a], false);
    let test = "test_quantized.py::TestQuantized::test_qmm_non_transposed";
    let cut = t.join("cut.log");
    std::fs::write(
        &cut,
        format!(
            "[gw7] [ 77%] SUBPASSED(M='31', group_size='64') {test} \n\
             [gw7] [100%] FAILED {test} \n\
             [gw7] [100%] SUBFAILED(M='33', group_size='64') {test} /venv/_pytest/unraisableexception.py:67: PytestUnraisableExceptionWarning\n"
        ),
    )
    .unwrap();
    let cut = cut.to_str().unwrap().to_string();
    let (out, _, part) = report(&f, &pin, &cut, 0);
    assert_eq!(part["failed"], 0, "{}", out.snapshot());
    assert_eq!(
        part["interrupted"][0],
        "test_qmm_non_transposed M=33,group_size=64"
    );

    let failed = t.join("failed.log");
    std::fs::write(
        &failed,
        f.read(Path::new(&cut)).replace(
            "/venv/_pytest/unraisableexception.py:67: PytestUnraisableExceptionWarning",
            "",
        ),
    )
    .unwrap();
    let failed = failed.to_str().unwrap().to_string();
    let (out, _, part) = report(&f, &pin, &failed, 1);
    assert_eq!(part["failed"], 1, "{}", out.snapshot());
    assert_eq!(part["not_run_by_control"][0], "test_qmm_non_transposed");
    // Stopped in one log, failing in another joined to it: a failure, not an interruption.
    let joined = format!("{cut},{failed}");
    let (out, _, part) = report(&f, &pin, &joined, 1);
    assert_eq!(part["failed"], 1, "{}", out.snapshot());
    assert_eq!(part["interrupted"], serde_json::json!([]));
}

/// shard_subtests.py's product: N shards run every combination exactly once, no (first, second)
/// factor pair, whose kernels a shard compiles, in two shards, and a test's later `product` calls
/// whole; the main run leaves out exactly the sharded test (not test_qmm_shapes with test_qmm); a
/// malformed shard is refused.
#[test]
fn shard_subtests_splits_a_product_without_overlap() {
    let script = r#"
import itertools, sys
sys.path.insert(0, sys.argv[1])
from shard_subtests import ShardedProduct, parse, is_test
f = ([128, 64, 32], [2, 4, 8], [8, 32, 33, 64], [128, 256], [True, False])
for n in (1, 4, 9, 10):
    shards = []
    for i in range(n):
        product = ShardedProduct(i, n)
        shards.append(list(product(*f)))
        # A later call in the same test (a nested loop) is left whole.
        assert list(product([1, 2], [3])) == [(1, 3), (2, 3)], (i, n)
    every = sorted(c for s in shards for c in s)
    assert every == sorted(itertools.product(*f)), n
    keys = [{c[:2] for c in s} for s in shards]
    assert sum(len(k) for k in keys) == len(set().union(*keys)) == 9, n
t = "test_quantized.py::TestQuantized::test_qmm"
assert is_test("python/tests/" + t, t) and is_test(t, t)
assert not is_test("python/tests/" + t + "_shapes", t) and not is_test("x" + t, t)
for bad in ("3/3", "x/9", "1"):
    try:
        parse(bad)
    except ValueError as e:
        print(e)
    else:
        raise SystemExit(f"{bad} accepted")
"#;
    let f = Fixture::new(&[("a", "a\n")]);
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(workspace().join("cuda/bundle"))
        .output()
        .unwrap();
    let out = f.out(out).code(0);
    assert_eq!(
        out.stdout,
        "shard 3 of 3: want 0 <= I < N\n\
         SUBTEST_SHARD='x/9': want I/N, e.g. 0/9\n\
         SUBTEST_SHARD='1': want I/N, e.g. 0/9\n",
        "{}",
        out.snapshot()
    );
}

/// test-python.sh refuses, with exit 2 and before it looks for the bundle's extension or writes
/// its output folder, a policy it does not know and a TEST_SHARDS that is not a count.
#[test]
fn test_python_refuses_an_unknown_policy_and_a_bad_shard_count() {
    let refused = |policy: &str, shards: &str, message: &str| {
        let f = Fixture::new(&[("a", "a\n")]);
        let outdir = f.t().join("out");
        let out = Command::new("bash")
            .arg(workspace().join("cuda/bundle/test-python.sh"))
            .arg(policy)
            .arg(&outdir)
            .env("TEST_SHARDS", shards)
            .output()
            .unwrap();
        let out = f.out(out).code(2);
        assert!(out.stderr.contains(message), "{}", out.snapshot());
        assert!(!outdir.exists());
    };
    refused("fast", "9", "policy: upstream, streamed or pin, not fast");
    refused("streamed", "0", "TEST_SHARDS: a count of processes, not 0");
    refused("upstream", "x", "TEST_SHARDS: a count of processes, not x");
}

/// h200-pipeline.sh refuses a QMV_RUNS naming a run it does not have, `none` beside a run, and a
/// QMV_LIB it does not know, with exit 2 and the value, before it writes its state folder; known
/// values pass, `none` alone too.
#[test]
fn pipeline_refuses_an_unknown_probe_run() {
    let f = Fixture::new(&[("a", "a\n")]);
    let dir = f.t().join("state");
    let run = |runs: &str, lib: &str| {
        let out = Command::new("bash")
            .arg(workspace().join("cuda/machine/h200-pipeline.sh"))
            .arg("no-such-command")
            .env("PIPELINE_DIR", &dir)
            .env("QMV_RUNS", runs)
            .env("QMV_LIB", lib)
            .output()
            .unwrap();
        f.out(out)
    };
    let refused = |runs: &str, lib: &str, message: &str| {
        let out = run(runs, lib).code(2);
        assert!(out.stderr.contains(message), "{}", out.snapshot());
        assert!(!dir.exists(), "{}", out.snapshot());
    };
    refused(
        "pdl-7b-40 pdl-7b-4O",
        "1",
        "QMV_RUNS names no run 'pdl-7b-4O'",
    );
    refused("pdl-7b-40", "before", "not 'before'");
    refused("none pdl-7b-40", "1", "QMV_RUNS=none stands alone");
    // Known values get past it to the usage message (exit 2 for the unknown command).
    let known = "hosttok-7b-40 pdl-7b-40 both-7b-1024 rep-7b-1024 rep-nocudnn-7b-1024 sdpa-ops";
    for (runs, lib) in [
        (known, "0"),
        (known, "1"),
        (known, "after"),
        (" none ", "1"),
    ] {
        let out = run(runs, lib).code(2);
        assert!(
            out.stderr.contains("usage: h200-pipeline.sh"),
            "{}",
            out.snapshot()
        );
    }
}

/// A touched file that differs from the pin after the series is reverted (an edit outside every
/// hunk, so `git apply -R` succeeds) is named, and the script fails.
#[test]
fn control_names_a_touched_file_that_is_not_the_pins() {
    let f = fixture();
    let b = bundle_with_control(&f);
    let lib = b.join("mlx/src/lib.c");
    let text = f
        .read(&lib)
        .replace("int f9;", "int f9; // edited on the GPU machine");
    std::fs::write(&lib, text).unwrap();
    let out = control(&f, &b, &[]).code(1);
    assert!(
        out.stderr.contains("control: src/lib.c: ") && out.stderr.contains("is not the pin's"),
        "{}",
        out.snapshot()
    );
}

/// A pytest log as test-python.sh writes it (xdist, pytest-subtests): each failing subtest on its
/// progress line and, when the run got to its summary, again in the short summary.
fn pytest_log(dir: &Path, name: &str, failed: &[&str], summary: bool) -> String {
    let test = "test_quantized.py::TestQuantized::test_qmm";
    let mut text = String::from("============ test session starts ============\n");
    for sub in failed {
        text.push_str(&format!("[gw0] [ 50%] SUBFAILED({sub}) {test} \n"));
    }
    text.push_str(&format!(
        "[gw0] [ 90%] SUBPASSED(shape=(8, 128, 128)) {test} \n"
    ));
    if summary {
        text.push_str("=========== short test summary info ===========\n");
        for sub in failed {
            text.push_str(&format!(
                "SUBFAILED({sub}) {test} - AssertionError: array(nan) not less than 0.0015\n"
            ));
        }
        text.push_str(&format!("FAILED {test} - {TIMEOUT}\n"));
        text.push_str("===== 2 failed, 26 passed, 2000 subtests passed in 529.18s =====\n");
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

const TIMEOUT: &str = "Failed: Timeout (>480.0s) from pytest-timeout.";

fn failures(f: &Fixture, args: &[String]) -> Out {
    let out = Command::new("python3")
        .arg(workspace().join("cuda/bundle/failures.py"))
        .args(args)
        .output()
        .unwrap();
    f.out(out)
}

/// failures.py's JSON for `control` against one policy's `logs` (paths joined by commas), exiting
/// with `code`: the output, the whole report, and the policy's part of it (the report names each
/// log as given; the fixture's output shows the temporary folder as $TMP).
fn report(
    f: &Fixture,
    control: &str,
    logs: &str,
    code: i32,
) -> (Out, serde_json::Value, serde_json::Value) {
    let out = failures(f, &[control.to_string(), logs.to_string()]).code(code);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let part = report[&f.scrub(logs)].clone();
    (out, report, part)
}

/// Failures the control shares pass (exit 0); one it does not is named (exit 1); a log cut short
/// says so, and a test that ran past pytest's limit is listed.
#[test]
fn failures_names_what_the_control_does_not_fail() {
    let f = Fixture::new(&[("a", "a\n")]);
    let t = f.t();
    let a = "shape='(32, 128, 128)', group_size='128'";
    let b = "shape='(64, 128, 128)', group_size='128'";
    let c = "shape='(8, 256, 64)', group_size='64'";
    let pin = pytest_log(t, "pin.log", &[a, b], false);
    let shared = pytest_log(t, "streamed.log", &[a], true);
    let own = pytest_log(t, "upstream.log", &[b, c], true);

    let (_, whole, part) = report(&f, &pin, &shared, 0);
    assert_eq!(whole["schema"], 2);
    assert_eq!(whole["control"]["failed"], 2);
    assert_eq!(whole["control"]["complete"], false);
    assert_eq!(part["also_failed_by_control"], 1);
    assert_eq!(part["complete"], true);
    assert_eq!(part["timed_out"][0], "test_qmm");

    // Each subtest counted once, though the summary names it again.
    assert_eq!(part["failed"], 1);

    let (_, _, part) = report(&f, &pin, &format!("{shared},{own}"), 1);
    assert_eq!(part["failed"], 3);
    assert_eq!(
        part["not_failed_by_control"][0],
        "test_qmm shape=(8,256,64),group_size=64"
    );

    // A crashed worker fails a whole test outside its subtests: counted, and named.
    let crash = t.join("crash.log");
    let crashed = "test_quantized.py::TestQuantized::test_throw - worker 'gw5' crashed";
    let text = f.read(&shared).replace(
        &format!("test_quantized.py::TestQuantized::test_qmm - {TIMEOUT}"),
        crashed,
    );
    std::fs::write(&crash, text).unwrap();
    let crash = crash.to_str().unwrap().to_string();
    let out = failures(&f, &[pin.clone(), crash]).code(1);
    assert!(
        out.stdout.contains("\"test_throw (whole test)\""),
        "{}",
        out.snapshot()
    );

    // A log with no test result in it (an aborted run) is an error, not a pass.
    let empty = t.join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let out = failures(&f, &[pin.clone(), empty.to_str().unwrap().to_string()]).code(2);
    assert!(out.stderr.contains("no test result"), "{}", out.snapshot());

    // A log that is not there is named; no report is printed.
    let missing = t.join("missing.log").to_str().unwrap().to_string();
    let out = failures(&f, &[pin, missing]).code(2);
    assert!(
        out.stderr.contains("missing.log") && out.stdout.is_empty(),
        "{}",
        out.snapshot()
    );
}

/// One suite.sh test file's results as outcomes.py writes them: `lines` into FILE.jsonl, and
/// FILE.rc ("RC SECONDS").
fn suite_file(dir: &Path, name: &str, lines: &[serde_json::Value], rc: i32) {
    std::fs::create_dir_all(dir).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join(format!("{name}.jsonl")), text).unwrap();
    std::fs::write(dir.join(format!("{name}.rc")), format!("{rc} 3\n")).unwrap();
    std::fs::write(dir.join(format!("{name}.log")), "last line of pytest\n").unwrap();
}

fn suite_json(f: &Fixture, runs: &[String]) -> (Out, serde_json::Value) {
    let header = f.t().join("header.json");
    std::fs::write(&header, "{\"gpu\": \"fixture\"}\n").unwrap();
    let json = f.t().join("suite.json");
    let out = Command::new("python3")
        .arg(workspace().join("cuda/bundle/suite_json.py"))
        .arg(&json)
        .arg(&header)
        .args(runs)
        .output()
        .unwrap();
    let out = f.out(out);
    let doc = std::fs::read_to_string(&json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (out, doc)
}

/// suite_json.py reads each outcome as the schema says: a failing subtest fails its test, a test
/// started with no result is crashed (timeout when its file ran out of time), a file that ended
/// before any test started is one entry by its name, tests never reached are counted as not run;
/// doctest's XML gives the C++ cases, the one left open by a crash crashed. Only a test the fork
/// fails and the pin passes is a regression (exit 1).
#[test]
fn suite_json_reads_outcomes_and_compares_with_the_pin() {
    use serde_json::json;
    let f = Fixture::new(&[("a", "a\n")]);
    let fork = f.t().join("streamed");
    let pin = f.t().join("pin");
    let a = |t: &str| format!("test_a.py::TestA::{t}");
    let rep =
        |id: &str, when: &str, outcome: &str| json!({"id": id, "when": when, "outcome": outcome});
    let a_lines = |sub_fails: bool| {
        let mut l = vec![
            json!({"collected": [a("test_pass"), a("test_sub"), a("test_skip"), a("test_crash"), a("test_never")]}),
            json!({"start": a("test_pass")}),
            rep(&a("test_pass"), "setup", "passed"),
            rep(&a("test_pass"), "call", "passed"),
            json!({"start": a("test_sub")}),
            json!({"id": a("test_sub"), "when": "call", "outcome": if sub_fails {"failed"} else {"passed"}, "subtest": "{'i': 1}", "reason": "AssertionError"}),
            rep(&a("test_sub"), "call", "passed"),
            json!({"start": a("test_skip")}),
            json!({"id": a("test_skip"), "when": "setup", "outcome": "skipped", "reason": "Skipped: no torch"}),
            json!({"start": a("test_crash")}),
        ];
        if !sub_fails {
            l.push(rep(&a("test_crash"), "call", "passed"));
            l.push(json!({"start": a("test_never")}));
            l.push(rep(&a("test_never"), "call", "passed"));
        }
        l
    };
    suite_file(&fork, "test_a", &a_lines(true), 134);
    suite_file(&pin, "test_a", &a_lines(false), 0);
    let b = |t: &str| format!("test_b.py::TestB::{t}");
    for (dir, rc) in [(&fork, 124), (&pin, 124)] {
        suite_file(
            dir,
            "test_b",
            &[
                json!({"collected": [b("test_slow")]}),
                json!({"start": b("test_slow")}),
                json!({"id": b("test_timed"), "when": "call", "outcome": "failed", "reason": "Failed: Timeout (>30.0s) from pytest-timeout.", "timeout": true}),
            ],
            rc,
        );
    }
    suite_file(&fork, "test_c", &[], 139);
    suite_file(&pin, "test_c", &[], 2);
    std::fs::write(
        fork.join("cpp.xml"),
        "<doctest binary=\"./tests\">\n<TestSuite>\n\
         <TestCase name=\"test a &amp; b\" filename=\"/x/ops_tests.cpp\" line=\"3\">\n\
         <OverallResultsAsserts successes=\"3\" failures=\"0\" test_case_success=\"true\"/>\n</TestCase>\n\
         <TestCase name=\"test svd\" filename=\"/x/linalg_tests.cpp\" line=\"3\" skipped=\"true\"/>\n\
         <TestCase name=\"test signal\" filename=\"/x/ops_tests.cpp\" line=\"7\">\n\
         <Exception crash=\"true\">\n SIGSEGV - Segmentation violation signal\n</Exception>\n\
         <OverallResultsAsserts successes=\"0\" failures=\"0\" test_case_success=\"false\"/>\n</TestCase>\n\
         <TestCase name=\"test crash\" filename=\"/x/ops_tests.cpp\" line=\"9\">\n",
    )
    .unwrap();
    std::fs::write(fork.join("cpp.rc"), "139 4\n").unwrap();
    let runs = [
        format!("streamed:gpu:{}", fork.display()),
        format!("pin:gpu:{}", pin.display()),
    ];
    let (out, doc) = suite_json(&f, &runs);
    let out = out.code(1);
    assert!(
        out.stdout.contains("streamed/gpu vs pin: 2 regressions"),
        "{}",
        out.snapshot()
    );
    let outcome = |run: usize, id: &str| {
        doc["runs"][run]["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["outcome"].as_str().unwrap().to_string())
    };
    assert_eq!(doc["header"]["gpu"], "fixture");
    assert_eq!(doc["schema"], 1);
    assert_eq!(outcome(0, &a("test_pass")).as_deref(), Some("passed"));
    assert_eq!(outcome(0, &a("test_sub")).as_deref(), Some("failed"));
    assert_eq!(outcome(0, &a("test_skip")).as_deref(), Some("skipped"));
    assert_eq!(outcome(0, &a("test_crash")).as_deref(), Some("crashed"));
    assert_eq!(outcome(0, &a("test_never")), None);
    assert_eq!(outcome(0, &b("test_slow")).as_deref(), Some("timeout"));
    assert_eq!(outcome(0, &b("test_timed")).as_deref(), Some("timeout"));
    assert_eq!(outcome(0, "test_c.py").as_deref(), Some("crashed"));
    assert_eq!(outcome(1, "test_c.py").as_deref(), Some("error"));
    assert_eq!(
        outcome(0, "cpp::ops_tests.cpp::test a & b").as_deref(),
        Some("passed")
    );
    assert_eq!(
        outcome(0, "cpp::linalg_tests.cpp::test svd").as_deref(),
        Some("skipped")
    );
    assert_eq!(
        outcome(0, "cpp::ops_tests.cpp::test crash").as_deref(),
        Some("crashed")
    );
    assert_eq!(
        outcome(0, "cpp::ops_tests.cpp::test signal").as_deref(),
        Some("crashed")
    );
    let files = doc["runs"][0]["files"].as_array().unwrap();
    let file_a = files.iter().find(|e| e["file"] == "test_a.py").unwrap();
    assert_eq!(
        (file_a["collected"].as_u64(), file_a["not_run"].as_u64()),
        (Some(5), Some(1))
    );
    let c = &doc["comparison"][0];
    assert_eq!(c["regressions"], json!([a("test_crash"), a("test_sub")]));
    assert_eq!(c["fixed"], json!([]));

    // The same file judged here (`test-upstream --from`): the same regressions, exit 1; what
    // fails at both (test_b's timeouts, test_c.py's crash) is upstream's own.
    let json = f.t().join("suite.json");
    let from = |extra: &[&str]| {
        let mut args = vec!["test-upstream", "--from", json.to_str().unwrap()];
        args.extend_from_slice(extra);
        crate::fixture::run_xtask(None, None, &args)
    };
    let (code, stdout, stderr) = from(&["--json"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["comparison"][0]["regressions"], c["regressions"]);
    assert_eq!(
        v["comparison"][0]["upstream_failures"],
        json!([b("test_slow"), b("test_timed"), "test_c.py"])
    );
    let (code, stdout, _) = from(&[]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains(&format!("REGRESSION streamed/gpu: {}", a("test_crash")))
            && stdout.contains("streamed/gpu against the pin: 2 regression(s), 3 upstream's own"),
        "{stdout}"
    );

    // The same folder as CUDA's third policy's run: judged the same way, by both tools.
    let (out, doc) = suite_json(
        &f,
        &[format!("invariant:gpu:{}", fork.display()), runs[1].clone()],
    );
    out.code(1);
    assert_eq!(doc["comparison"][0]["regressions"], c["regressions"]);
    let (code, stdout, _) = from(&[]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains(&format!("REGRESSION invariant/gpu: {}", a("test_crash"))),
        "{stdout}"
    );

    // The pin's run alone compares nothing and fails nothing; an unknown policy is refused.
    suite_json(&f, &runs[1..]).0.ok();
    let (out, _) = suite_json(&f, &[format!("fast:gpu:{}", pin.display())]);
    assert!(
        out.code(2)
            .stderr
            .contains("policy upstream|streamed|invariant|pin")
    );
}

/// A file run again after it ran out of time (DIR/first/ holds the first attempt) is judged by
/// the second attempt, and its files entry keeps the first; without the second attempt's pass
/// the same timeout is a regression (the check can fail).
#[test]
fn suite_json_judges_a_retried_file_by_its_second_attempt() {
    use serde_json::json;
    let f = Fixture::new(&[("a", "a\n")]);
    let fork = f.t().join("streamed");
    let pin = f.t().join("pin");
    let id = "test_a.py::TestA::test_x";
    let lines = |call: bool| {
        let mut l = vec![json!({"collected": [id]}), json!({"start": id})];
        if call {
            l.push(json!({"id": id, "when": "call", "outcome": "passed"}));
        }
        l
    };
    suite_file(&pin, "test_a", &lines(true), 0);
    suite_file(&fork, "test_a", &lines(false), 124);
    // doctest's handler closes the case it was in when the file's time limit sends SIGTERM: a
    // timeout, not a failure.
    std::fs::write(
        fork.join("cpp.xml"),
        "<TestCase name=\"test slow\" filename=\"/x/ops_tests.cpp\" line=\"2\">\n\
         <Exception crash=\"true\">\n SIGTERM - Termination request signal\n</Exception>\n\
         <OverallResultsAsserts successes=\"0\" failures=\"0\" test_case_success=\"false\"/>\n</TestCase>\n",
    )
    .unwrap();
    std::fs::write(fork.join("cpp.rc"), "124 300\n").unwrap();
    let runs = [
        format!("streamed:gpu:{}", fork.display()),
        format!("pin:gpu:{}", pin.display()),
    ];
    let (out, doc) = suite_json(&f, &runs);
    out.code(1);
    assert_eq!(doc["comparison"][0]["regressions"], json!([id]));
    let slow = &doc["runs"][0]["tests"].as_array().unwrap()[1];
    assert_eq!(
        (slow["id"].as_str(), slow["outcome"].as_str()),
        (Some("cpp::ops_tests.cpp::test slow"), Some("timeout"))
    );
    std::fs::remove_file(fork.join("cpp.xml")).unwrap();
    std::fs::remove_file(fork.join("cpp.rc")).unwrap();

    suite_file(&fork.join("first"), "test_a", &lines(false), 124);
    suite_file(&fork, "test_a", &lines(true), 0);
    let (out, doc) = suite_json(&f, &runs);
    out.code(0);
    let entry = &doc["runs"][0]["files"][0];
    assert_eq!(entry["rc"], 0);
    assert_eq!(
        entry["first_attempt"],
        json!({"rc": 124, "seconds": 3, "counts": {"timeout": 1}})
    );
    assert_eq!(doc["comparison"][0]["regressions"], json!([]));
    assert_eq!(doc["comparison"][0]["flaky"], json!([]));

    // A file run again after a failure: the second attempt's pass judges it, and the test is
    // named (first_outcome, flaky) rather than hidden; one that fails again stays a regression.
    let failed = |call: &str| {
        vec![
            json!({"collected": [id]}),
            json!({"start": id}),
            json!({"id": id, "when": "call", "outcome": call}),
        ]
    };
    suite_file(&fork.join("first"), "test_a", &failed("failed"), 1);
    let (out, doc) = suite_json(&f, &runs);
    out.code(0);
    assert_eq!(doc["runs"][0]["tests"][0]["first_outcome"], "failed");
    assert_eq!(doc["comparison"][0]["flaky"], json!([id]));
    // Read back here, the same verdict: named flaky, not a regression.
    let json_file = f.t().join("suite.json");
    let (code, stdout, stderr) = crate::fixture::run_xtask(
        None,
        None,
        &[
            "test-upstream",
            "--from",
            json_file.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["comparison"][0]["flaky"], json!([id]));
    assert_eq!(v["comparison"][0]["regressions"], json!([]));
    suite_file(&fork, "test_a", &failed("failed"), 1);
    let (out, doc) = suite_json(&f, &runs);
    out.code(1);
    assert_eq!(doc["comparison"][0]["flaky"], json!([]));
    assert_eq!(doc["comparison"][0]["regressions"], json!([id]));
}

/// ptx_stale.py drops the cache entries whose saved source includes a changed header, directly
/// or through another header, and an entry it cannot judge (no .cu); with the same sums on both
/// sides it drops nothing (the check can keep as well as drop); bad sums are exit 2.
#[test]
fn ptx_stale_drops_entries_whose_headers_changed() {
    let f = Fixture::new(&[("a", "a\n")]);
    let t = f.t();
    // Two roots, as NVRTC has them: the headers MLX embeds (device/) and the include folder.
    let inc = t.join("inc/mlx/device");
    let dev = t.join("device");
    std::fs::create_dir_all(&dev).unwrap();
    let roots = format!("{}:{}", t.join("inc").display(), dev.display());
    let cache = t.join("cache");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::create_dir_all(cache.join("long")).unwrap();
    std::fs::write(inc.join("outer.cuh"), "#include \"mlx/device/inner.cuh\"\n").unwrap();
    std::fs::write(dev.join("inner.cuh"), "int v;\n").unwrap();
    std::fs::write(inc.join("other.cuh"), "int w;\n").unwrap();
    let script = workspace().join("cuda/bundle/ptx_stale.py");
    let py = |args: &[&std::ffi::OsStr]| {
        let out = Command::new("python3")
            .arg(&script)
            .args(args)
            .output()
            .unwrap();
        f.out(out)
    };
    let sums = |name: &str| {
        let out = py(&["sums".as_ref(), roots.as_ref()]).code(0);
        std::fs::write(t.join(name), &out.stdout).unwrap();
        t.join(name)
    };
    for (entry, source) in [
        ("stale", "#include \"mlx/device/outer.cuh\"\n"),
        ("fresh", "#include <mlx/device/other.cuh>\n"),
    ] {
        for ext in ["ptx", "txt"] {
            std::fs::write(cache.join(format!("{entry}.{ext}")), "x").unwrap();
        }
        std::fs::write(cache.join(format!("{entry}.cu")), source).unwrap();
    }
    std::fs::write(cache.join("long/unjudged.ptx"), "x").unwrap();
    let old = sums("old.sums");
    let drop = |new: &Path| {
        py(&[
            "drop".as_ref(),
            old.as_os_str(),
            new.as_os_str(),
            roots.as_ref(),
            cache.as_os_str(),
        ])
    };
    let left = || -> Vec<String> {
        files_under(&cache, &[])
            .keys()
            .map(|p| p.display().to_string())
            .collect()
    };
    let all = left();
    assert!(drop(&old).code(0).stdout.contains("nothing dropped"));
    assert_eq!(left(), all);
    std::fs::write(dev.join("inner.cuh"), "int v2;\n").unwrap();
    let new = sums("new.sums");
    let out = drop(&new).code(0);
    assert!(
        out.stdout.contains("2 cache entries dropped"),
        "{}",
        out.snapshot()
    );
    assert_eq!(left(), ["fresh.cu", "fresh.ptx", "fresh.txt"]);
    std::fs::write(t.join("bad.sums"), "not a sum\n").unwrap();
    let out = drop(&t.join("bad.sums"));
    assert!(out.code(2).stderr.contains("bad.sums:1"));
}

/// `test-upstream --from` refuses a file it cannot judge, naming it (and the line), exit 2; a
/// file with no pin run judges nothing and says so (exit 0).
#[test]
fn test_upstream_from_refuses_what_it_cannot_judge() {
    let f = Fixture::new(&[("a", "a\n")]);
    let from = |name: &str, text: &str| {
        let p = f.t().join(name);
        std::fs::write(&p, text).unwrap();
        crate::fixture::run_xtask(
            None,
            None,
            &["test-upstream", "--from", p.to_str().unwrap()],
        )
    };
    let run = |policy: &str, outcome: &str| {
        format!(
            "{{\"policy\": \"{policy}\", \"device\": \"gpu\", \"tests\": [{{\"id\": \"t.py::T::a\", \"outcome\": \"{outcome}\"}}]}}"
        )
    };
    let (code, _, err) = from("bad.json", "{\"schema\": 1,\n \"runs\": [}");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.json: line 2"), "{err}");
    let (code, _, err) = from(
        "word.json",
        &format!("{{\"schema\": 1, \"runs\": [{}]}}", run("pin", "flaky")),
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("word.json") && err.contains("\"flaky\""),
        "{err}"
    );
    let (code, _, err) = from("schema.json", "{\"schema\": 7, \"runs\": []}");
    assert_eq!(code, 2);
    assert!(err.contains("schema 7"), "{err}");
    let (code, out, _) = from(
        "alone.json",
        &format!(
            "{{\"schema\": 1, \"runs\": [{}]}}",
            run("streamed", "failed")
        ),
    );
    assert_eq!(code, 0);
    assert!(out.contains("nothing judged against the pin"), "{out}");
    let (code, out, _) = from(
        "both.json",
        &format!(
            "{{\"schema\": 1, \"runs\": [{}, {}]}}",
            run("streamed", "failed"),
            run("pin", "failed")
        ),
    );
    assert_eq!(code, 0, "a failure at the pin too is upstream's own: {out}");
}

/// suite.sh refuses, with exit 2 and before it looks for the bundle, what it does not know.
#[test]
fn suite_refuses_an_unknown_policy_device_or_torch_mode() {
    let refused = |args: &[&str], torch: &str, message: &str| {
        let f = Fixture::new(&[("a", "a\n")]);
        let outdir = f.t().join("out");
        let out = Command::new("bash")
            .arg(workspace().join("cuda/bundle/suite.sh"))
            .args(args)
            .arg(&outdir)
            .env("SUITE_TORCH", torch)
            .output()
            .unwrap();
        let out = f.out(out).code(2);
        assert!(out.stderr.contains(message), "{}", out.snapshot());
        assert!(!outdir.exists());
    };
    refused(
        &["fast", "gpu"],
        "plain",
        "policy upstream, streamed, invariant or pin, not fast",
    );
    refused(&["pin", "tpu"], "plain", "device gpu or cpu, not tpu");
    refused(
        &["streamed", "cpu"],
        "maybe",
        "SUITE_TORCH plain, first, block or global, not maybe",
    );
}

/// suite.sh sets both switches to the policy it is given, except under `invariant` (CUDA's
/// third policy), where the CPU switch, which has two, is `streamed`: each test file's process
/// (a stand-in python3 on PATH) records what it saw.
#[test]
fn suite_sets_the_cpu_switch_to_streamed_under_invariant() {
    let f = Fixture::new(&[("a", "a\n")]);
    let bundle = f.t().join("bundle");
    let here = bundle.join("cuda/bundle");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(bundle.join("mlx/python/tests")).unwrap();
    std::fs::create_dir_all(bundle.join("mlx/python/mlx")).unwrap();
    std::fs::copy(
        workspace().join("cuda/bundle/suite.sh"),
        here.join("suite.sh"),
    )
    .unwrap();
    std::fs::write(bundle.join("mlx/python/tests/test_a.py"), "").unwrap();
    std::fs::write(bundle.join("mlx/python/mlx/core.so"), "").unwrap();
    let bin = f.t().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let seen = f.t().join("seen.txt");
    write_executable(
        &bin.join("python3"),
        &format!(
            "#!/bin/sh\ncase \"$*\" in *pytest*) echo \"$MLX_CUDA_QMV_BATCH_POLICY $MLX_CPU_QMM_T_POLICY\" >> {};; *) exit 1;; esac\n",
            seen.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    for (policy, want) in [
        ("invariant", "invariant streamed"),
        ("streamed", "streamed streamed"),
        ("upstream", "upstream upstream"),
    ] {
        let _ = std::fs::remove_file(&seen);
        let out = Command::new("bash")
            .arg(here.join("suite.sh"))
            .args([policy, "gpu"])
            .arg(f.t().join(format!("out-{policy}")))
            .env("PATH", &path)
            .env("SUITE_FILES", "test_a.py")
            .env("SUITE_CPP", "0")
            .output()
            .unwrap();
        let out = f.out(out).code(0);
        let got = std::fs::read_to_string(&seen).unwrap_or_default();
        assert_eq!(got.trim(), want, "{}", out.snapshot());
    }
}

/// h200-blas.sh names the first carried package it lacks, and writes nothing to eval.
#[test]
fn h200_blas_names_a_missing_package() {
    let f = Fixture::new(&[("a", "a\n")]);
    let debs = f.t().join("debs");
    std::fs::create_dir_all(&debs).unwrap();
    let out = Command::new("bash")
        .arg(workspace().join("cuda/machine/h200-blas.sh"))
        .arg(&debs)
        .arg(f.t().join("prefix"))
        .output()
        .unwrap();
    let out = f.out(out).code(2);
    assert!(
        out.stderr.contains("no libopenblas0-pthread_*.deb in"),
        "{}",
        out.snapshot()
    );
    assert!(out.stdout.is_empty());
}

/// cuda/scope/repro.sh, the lookup-scope fault behind issue 25's cuDNN crash, without a GPU: a
/// module opened RTLD_LOCAL whose scope holds a library defining libstdc++'s std::call_once slots
/// before libstdc++ faults in its sub-library's std::call_once; making the front library global
/// (the first workaround tried) does not help, making the module itself global (the second) does,
/// and so does opening it RTLD_GLOBAL. Without the interposer it passes: the control that shows
/// the fault is the interposer's and not the harness's. The cause the H200 showed: the module
/// itself, linked with libstdc++.a, exports the slot and faults the same way; linked with
/// --exclude-libs,ALL (overlay 0012) it passes.
#[test]
fn scope_repro_faults_as_the_h200_did_and_overlay_0012s_fix_holds() {
    let f = Fixture::new(&[("a", "a\n")]);
    let out = Command::new("bash")
        .arg(workspace().join("cuda/scope/repro.sh"))
        .arg(f.t().join("scope"))
        .output()
        .unwrap();
    let out = f.out(out).code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let verdict = |case: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{case}: ")))
            .map(|v| v.split(' ').next().unwrap().to_string())
            .unwrap_or_else(|| panic!("no line for {case}: {}", out.snapshot()))
    };
    for (case, want) in [
        ("local none", "crashed"),
        ("local front", "crashed"),
        ("local self", "passed"),
        ("global none", "passed"),
        ("global self", "passed"),
        ("local none, no interposer", "passed"),
        ("local none, static libstdc++ exported", "crashed"),
        ("local none, static libstdc++ hidden", "passed"),
    ] {
        assert_eq!(verdict(case), want, "{case}: {}", out.snapshot());
    }
}

/// cuda/machine/link-scope.sh on a stand-in bundle: a CMake/Ninja build of a module linked with
/// -static-libstdc++ and -Wl,--exclude-libs,ALL (as overlay 0012 links MLX's extension, on a
/// toolchain that links libstdc++ statically). The script finds the module's link in Ninja, links
/// it again without the flag, and says which archive member defines libstdc++'s call_once slot and
/// what each module exports; the probes run (and fail: no MLX here) without stopping it.
#[test]
fn link_scope_names_the_archive_that_defines_the_call_once_slot() {
    let f = Fixture::new(&[("a", "a\n")]);
    let b = f.t().join("bundle");
    let src = b.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(b.join("mlx/python/mlx")).unwrap();
    std::fs::create_dir_all(b.join("install/include")).unwrap();
    std::fs::write(
        src.join("core.cpp"),
        "#include <mutex>\nstatic std::once_flag f;\nstatic int x;\n\
         extern \"C\" int run() { std::call_once(f, [] { x = 1; }); return x; }\n",
    )
    .unwrap();
    let out_dir = b.join("mlx/python/mlx");
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.20)\nproject(t CXX)\nadd_library(core MODULE core.cpp)\n\
             set_target_properties(core PROPERTIES PREFIX \"\" OUTPUT_NAME \"core.cpython-3-x86_64-linux-gnu\" \
             LIBRARY_OUTPUT_DIRECTORY {})\n\
             target_link_options(core PRIVATE -static-libstdc++ \"LINKER:--exclude-libs,ALL\")\n",
            out_dir.display()
        ),
    )
    .unwrap();
    let run = |cmd: &str, args: &[&str]| {
        let o = Command::new(cmd)
            .args(args)
            .current_dir(&b)
            .output()
            .unwrap();
        f.out(o).code(0);
    };
    run("cmake", &["-S", "src", "-B", "build", "-G", "Ninja"]);
    run("ninja", &["-C", "build"]);
    let res = b.join("res");
    let o = Command::new("bash")
        .arg(workspace().join("cuda/machine/link-scope.sh"))
        .arg(&b)
        .arg(&res)
        .output()
        .unwrap();
    let out = f.out(o).code(0);
    let read = |name: &str| std::fs::read_to_string(res.join(name)).unwrap();
    let trace = read("trace.txt");
    assert!(
        trace.contains("libstdc++.a(mutex.o): definition of _ZSt11__once_call"),
        "{trace}\n{}",
        out.snapshot()
    );
    assert!(trace.contains("relink rc=0"), "{trace}");
    let exports = read("exports.txt");
    let line = |m: &str| {
        exports
            .lines()
            .find(|l| l.starts_with(&format!("{m}:")))
            .unwrap_or_else(|| panic!("no {m} line: {exports}"))
            .to_string()
    };
    assert!(!line("built").contains("__once_call"), "{exports}");
    assert!(line("bare").contains("B _ZSt11__once_call"), "{exports}");
    assert!(read("link.txt").contains("--exclude-libs,ALL"));
    assert!(!read("relink.sh").contains("--exclude-libs"));
    assert!(read("toolchain.txt").starts_with("linker driver: "));
    // Eight probes, each with its exit status, though none could import MLX here.
    let probes = read("probes.txt");
    assert_eq!(probes.matches(": rc=").count(), 8, "{probes}");
}

/// exactness_bench.py turns the committed H200 runs into the benchmark rows (every timed k of
/// every decoder configuration under both policies, each streamed row against the upstream run
/// of the same settings), and refuses a line that is not a run with exit 2, naming it.
#[test]
fn exactness_bench_rows_come_from_the_committed_runs() {
    let f = Fixture::new(&[("a", "a\n")]);
    let header = f.t().join("header.json");
    std::fs::write(&header, r#"{"gpu": "test"}"#).unwrap();
    let script = workspace().join("cuda/bench/exactness_bench.py");
    let bench = |runs: &Path| {
        let out = Command::new("python3")
            .arg(&script)
            .args([&header, runs])
            .output()
            .unwrap();
        f.out(out)
    };
    let runs = workspace().join("docs/benchmarks/exactness-cuda-h200.jsonl");
    let out = bench(&runs).code(0);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(doc["header"]["gpu"], "test");
    assert_eq!(
        rows.len(),
        4 * 4 * 2,
        "4 configurations x k = 1, 4, 8, 16 x 2 policies"
    );
    for r in rows {
        let k = r["k"].as_u64().unwrap();
        let streamed = r["policy"] == "streamed";
        assert_eq!(r.get("vs_upstream").is_some(), streamed, "{r}");
        if k > 1 && streamed {
            assert_eq!(r["logit_rows_identical"].as_u64(), Some(k), "{r}");
        }
    }
    let bad = f.t().join("bad.jsonl");
    std::fs::write(&bad, "# a comment\n{\"policy\": 1}\n").unwrap();
    let out = bench(&bad).code(2);
    assert!(
        out.stderr.contains("bad.jsonl:2: not an exactness run"),
        "{}",
        out.stderr
    );
}

/// The committed H200 runs of issue 27's library call hold what the docs say of them: the qmv
/// results have every arm on all nine shapes with the invariant policy's library parity clean
/// (and the control's not), and the 7b probe's three prompts render with every promised row
/// identical under `invariant` beside `streamed` and `upstream`.
#[test]
fn the_committed_invariant_runs_hold_their_claims() {
    let path = workspace().join("docs/benchmarks/qmv-cuda-h200.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut parity = doc["parity"].as_array().unwrap().iter();
    let lib = parity.find(|p| p["kind"] == "lib_parity").unwrap();
    assert_eq!(
        (
            lib["invariant_differ"].as_u64(),
            lib["streamed_differ"].as_u64()
        ),
        (Some(0), Some(0))
    );
    assert!(lib["upstream_differ"].as_u64().unwrap() > 0, "{lib}");
    let rows = doc["rows"].as_array().unwrap();
    let shapes: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| (r["n"].as_u64(), r["k"].as_u64()))
        .collect();
    assert_eq!(shapes.len(), 9);
    for r in rows.iter().filter(|r| r["bits"] == 4 || r["bits"] == 8) {
        let arms = &r["arms"];
        for arm in [
            "lib_upstream",
            "lib_streamed",
            "lib_invariant",
            "invariant",
            "upstream_qmv",
        ] {
            assert!(arms[arm].as_f64().is_some(), "{arm} missing: {r}");
        }
        if r["bits"] == 4 {
            assert!(
                arms["marlin"].as_f64().is_some() && arms["tinygemm"].as_f64().is_some(),
                "{r}"
            );
        }
    }
    let runs = workspace().join("docs/benchmarks/exactness-cuda-h200-invariant.jsonl");
    let (code, stdout, stderr) = crate::fixture::run_xtask(
        None,
        None,
        &[
            "exactness",
            "--backend",
            "cuda",
            "--from",
            runs.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("every promised row is identical"),
        "{stdout}"
    );
    for prompt in [40, 1024, 8192] {
        assert!(
            stdout.contains(&format!(
                "invariant (7b decoder at prompt {prompt}): 0 rows differ"
            )),
            "{stdout}"
        );
    }
}

/// The integers in `text` from `marker` up to the first `end` after it.
fn numbers_after(text: &str, marker: &str, end: char) -> Vec<u64> {
    let from = text.find(marker).unwrap_or_else(|| panic!("no {marker:?}"));
    let rest = &text[from + marker.len()..];
    let list = &rest[..rest
        .find(end)
        .unwrap_or_else(|| panic!("{marker:?}: no {end:?}"))];
    list.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// marlin_bench.cu times the benchmark's shapes and Ms, with the same indices as peers.py (which
/// BENCH_SHAPES selects from for both), and rotates as many weight bytes: the lists cannot drift.
#[test]
fn marlin_bench_measures_the_peers_shapes_and_ms() {
    let peers = std::fs::read_to_string(workspace().join("cuda/bench/peers.py")).unwrap();
    let marlin = std::fs::read_to_string(workspace().join("cuda/bench/marlin_bench.cu")).unwrap();
    let shapes = numbers_after(&peers, "\nSHAPES = ", ']');
    assert_eq!(shapes.len(), 18, "nine (N, K) in peers.py: {shapes:?}");
    assert_eq!(numbers_after(&marlin, "SHAPES[][2] = ", ';'), shapes);
    let ms = numbers_after(&peers, "\nMS = ", ']');
    assert_eq!(numbers_after(&marlin, "int MS[] = ", ';'), ms);
    assert_eq!(
        numbers_after(&marlin, "int MAX_M = ", ';'),
        [*ms.iter().max().unwrap()]
    );
    assert_eq!(
        numbers_after(&peers, "\nROTATE_BYTES = ", '\n'),
        numbers_after(&marlin, "ROTATE_BYTES = ", ';')
    );
    // Marlin's 4-bit gs 128 with its 64 x 256 tiles (N a multiple of 256, K of 64) takes every
    // shape.
    assert!(
        shapes
            .chunks(2)
            .all(|nk| nk[0] % 256 == 0 && nk[1] % 64 == 0),
        "{shapes:?}"
    );
    assert!(marlin.contains("#define MARLIN_THREAD_K 64\n"));
    assert!(marlin.contains("#define MARLIN_THREAD_N 256\n"));
}

/// collect.py files Marlin's float16 gs 128 records in the main config's rows (the library's
/// bfloat16 gs 64) of the same bits, N, K and M, says so per row, keeps each arm's
/// bit_identical and rows_differ, keeps the control records and sums the sanity records; a run
/// of Marlin alone keeps its own config.
#[test]
fn collect_files_an_arm_of_another_config_in_the_main_rows() {
    let f = Fixture::new(&[("a", "a\n")]);
    let t = f.t();
    let env = t.join("env.txt");
    std::fs::write(
        &env,
        "index, name, driver_version\n0, NVIDIA H200, 580\nCuda compilation tools, release 13.0\n",
    )
    .unwrap();
    let bench = |arm: &str, dtype: &str, gs: u32, m: u32, extra: &str| {
        format!(
            "{{\"kind\":\"bench\",\"arm\":\"{arm}\",\"dtype\":\"{dtype}\",\"bits\":4,\"gs\":{gs},\"n\":4096,\"k\":4096,\"m\":{m},\"us\":{m}.5,\"bytes\":100{extra}}}\n"
        )
    };
    let lib = t.join("lib.jsonl");
    let mut lines = String::new();
    for m in [1, 2] {
        lines += &bench("lib_upstream", "bfloat16", 64, m, "");
        lines += &bench("lib_streamed", "bfloat16", 64, m, "");
        lines += &bench(
            "tinygemm",
            "bfloat16",
            64,
            m,
            ",\"row0_bit_identical\":true",
        );
    }
    std::fs::write(&lib, lines).unwrap();
    let marlin = t.join("marlin.jsonl");
    std::fs::write(
        &marlin,
        bench(
            "marlin",
            "float16",
            128,
            1,
            ",\"row0_bit_identical\":true,\"rows_differ\":0",
        ) + &bench(
            "marlin",
            "float16",
            128,
            2,
            ",\"row0_bit_identical\":false,\"rows_differ\":2",
        ) + "{\"kind\":\"marlin_sanity\",\"n\":4096,\"k\":4096,\"m\":16,\"ok\":true}\n"
            + "{\"kind\":\"marlin_control\",\"n\":4096,\"k\":4096,\"m\":16,\"caught\":true}\n"
            + "{\"kind\":\"marlin_sanity\",\"n\":6144,\"k\":4096,\"m\":16,\"ok\":false}\n"
            + "{\"kind\":\"marlin_error\",\"n\":4096,\"k\":4096,\"m\":3,\"gs\":128,\"rc\":2}\n",
    )
    .unwrap();
    let collect = |out: &str, inputs: &[&Path]| -> serde_json::Value {
        let out = t.join(out);
        let run = Command::new("python3")
            .arg(workspace().join("cuda/bench/collect.py"))
            .arg(&out)
            .arg(&env)
            .args(inputs)
            .arg(t.join("absent.jsonl"))
            .output()
            .unwrap();
        f.out(run).ok();
        serde_json::from_str(&f.read(&out)).unwrap()
    };
    let doc = collect("results.json", &[&lib, &marlin]);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (row, m) in rows.iter().zip([1, 2]) {
        assert_eq!(
            (&row["dtype"], &row["gs"], &row["m"]),
            (&"bfloat16".into(), &64.into(), &m.into())
        );
        assert_eq!(row["arms"]["marlin"], m as f64 + 0.5, "{row}");
        assert_eq!(row["bytes"]["marlin"], 100);
        assert_eq!(
            row["arm_config"],
            serde_json::json!({"marlin": {"dtype": "float16", "gs": 128}})
        );
        assert_eq!(row["bit_identical"]["tinygemm"], true);
        assert_eq!(row["bit_identical"]["marlin"], m == 1, "{row}");
        assert_eq!(row["rows_differ"]["marlin"], if m == 1 { 0 } else { 2 });
        assert!(row["rows_differ"].get("tinygemm").is_none(), "{row}");
    }
    let parity = doc["parity"].as_array().unwrap();
    assert_eq!(parity[0]["kind"], "marlin_control");
    assert_eq!(parity[0]["caught"], true);
    assert_eq!(parity[1]["kind"], "marlin_error");
    assert_eq!(
        parity[2],
        serde_json::json!({"kind": "marlin_sanity", "shapes": 2, "ok": 1, "failed": [[6144, 4096]]})
    );
    assert_eq!(doc["header"]["gpu"], "NVIDIA H200");

    let alone = collect("alone.json", &[&marlin]);
    let rows = alone["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (&rows[0]["dtype"], &rows[0]["gs"]),
        (&"float16".into(), &128.into())
    );
    assert!(rows[0].get("arm_config").is_none(), "{}", rows[0]);
}

/// gpu-session.sh on a machine whose checkout lacks the carried bundle (a call that forgot to copy
/// it in) stops at `unpack`, says what to do, and leaves the state of earlier calls as it is: it once
/// took the missing file for a new bundle and deleted a half-built tree (session 16). With the
/// bundle there and the same as the unpacked one, it keeps the tree too.
#[test]
fn gpu_session_keeps_the_state_when_the_bundle_is_missing() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let built = state.join("mlx-cuda-bundle/build/half-built.o");
    std::fs::create_dir_all(built.parent().unwrap()).unwrap();
    std::fs::write(&built, "objects of an earlier call\n").unwrap();
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    let run = || {
        Command::new("bash")
            .arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("unpack")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .output()
            .unwrap()
    };
    let out = f.out(run()).code(1);
    assert!(
        out.stderr.contains("no .devcarry/bundle.tar.gz"),
        "{}",
        out.snapshot()
    );
    assert!(built.exists(), "the half-built tree was deleted");

    // The same bundle as the one unpacked: nothing is unpacked again.
    let carry = checkout.join(".devcarry");
    std::fs::create_dir_all(&carry).unwrap();
    std::fs::write(carry.join("bundle.tar.gz"), "a bundle\n").unwrap();
    std::fs::write(state.join("bundle.tar.gz"), "a bundle\n").unwrap();
    for d in ["lib", "harness", "bench", "bundle"] {
        std::fs::create_dir_all(checkout.join("cuda").join(d)).unwrap();
    }
    std::fs::create_dir_all(state.join("mlx-cuda-bundle/cuda")).unwrap();
    f.out(run()).code(0);
    assert!(built.exists(), "the same bundle was unpacked again");

    // The checkout's cuda/ folders go over the bundle's: a file that is the same is left as it
    // is, one that differs is replaced by a rename (a script running from the bundle's tree
    // reads on from the file it opened), a new one is added.
    use std::os::unix::fs::MetadataExt;
    let (ours, theirs) = (
        checkout.join("cuda/bundle"),
        state.join("mlx-cuda-bundle/cuda/bundle"),
    );
    std::fs::create_dir_all(&theirs).unwrap();
    for (name, text) in [("same.sh", "echo same\n"), ("build.sh", "echo old\n")] {
        std::fs::write(theirs.join(name), text).unwrap();
    }
    std::fs::write(ours.join("same.sh"), "echo same\n").unwrap();
    std::fs::write(ours.join("build.sh"), "echo new\n").unwrap();
    std::fs::create_dir_all(checkout.join("cuda/harness/sub")).unwrap();
    std::fs::write(checkout.join("cuda/harness/sub/new.cu"), "// new\n").unwrap();
    let inode = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (same, old) = (
        inode(&theirs.join("same.sh")),
        inode(&theirs.join("build.sh")),
    );
    let running = std::fs::File::open(theirs.join("build.sh")).unwrap();
    f.out(run()).code(0);
    assert_eq!(
        inode(&theirs.join("same.sh")),
        same,
        "an unchanged file was rewritten"
    );
    assert_ne!(
        inode(&theirs.join("build.sh")),
        old,
        "a changed file was written in place"
    );
    assert_eq!(
        std::fs::read_to_string(theirs.join("build.sh")).unwrap(),
        "echo new\n"
    );
    let mut was = String::new();
    std::io::Read::read_to_string(&mut &running, &mut was).unwrap();
    assert_eq!(was, "echo old\n", "the open file changed under its reader");
    let added = state.join("mlx-cuda-bundle/cuda/harness/sub/new.cu");
    assert_eq!(std::fs::read_to_string(added).unwrap(), "// new\n");
    assert!(!theirs.join("build.sh.sync").exists());
}

/// h200-pipeline.sh's `start` unpacks the bundle before it returns and keeps it as the one
/// unpacked, so a gpu-session.sh phase started beside the build in the same call with the
/// pipeline's folder finds the tree its own (and shares the kernel harness it builds) instead of
/// unpacking over the running build. Here the run it starts stops at once (no BLAS packages).
#[test]
fn pipeline_start_unpacks_the_bundle_before_it_returns() {
    let f = Fixture::new(&[("a", "a\n")]);
    let dir = f.t().join("state");
    let carry = f.t().join("carry");
    std::fs::create_dir_all(carry.join("src/mlx-cuda-bundle/cuda")).unwrap();
    std::fs::write(carry.join("src/mlx-cuda-bundle/cuda/marker"), "bundled\n").unwrap();
    let tar = Command::new("tar")
        .args(["-czf", "bundle.tar.gz", "-C", "src", "mlx-cuda-bundle"])
        .current_dir(&carry)
        .status()
        .unwrap();
    assert!(tar.success());
    std::fs::remove_dir_all(carry.join("src")).unwrap();
    let out = Command::new("bash")
        .arg(workspace().join("cuda/machine/h200-pipeline.sh"))
        .arg("start")
        .arg(&carry)
        .env("PIPELINE_DIR", &dir)
        .env("QMV", "1")
        .output()
        .unwrap();
    let out = f.out(out).code(0);
    assert!(
        out.stdout.contains("pipeline: started"),
        "{}",
        out.snapshot()
    );
    let marker = dir.join("mlx-cuda-bundle/cuda/marker");
    assert_eq!(std::fs::read_to_string(marker).unwrap(), "bundled\n");
    assert_eq!(
        std::fs::read(dir.join("bundle.tar.gz")).unwrap(),
        std::fs::read(carry.join("bundle.tar.gz")).unwrap()
    );
    // The background run ends (its BLAS step fails here): wait for it, then nothing is left.
    let done = dir.join("done");
    for _ in 0..600 {
        if done.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(done.exists(), "the pipeline's run did not end");
}

/// `text` written to `path` as an executable script (a stand-in for a program a script runs).
fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(path, perms).unwrap();
}

/// A checkout for gpu-session.sh whose carried bundle is the one `state` already unpacked (so
/// nothing is unpacked again), with the folders its unpack copies over the bundle's; returns its
/// `cuda/harness`.
pub(crate) fn unpacked_checkout(state: &Path, checkout: &Path) -> PathBuf {
    std::fs::create_dir_all(state.join("mlx-cuda-bundle/cuda")).unwrap();
    std::fs::write(state.join("bundle.tar.gz"), "a bundle\n").unwrap();
    std::fs::create_dir_all(checkout.join(".devcarry")).unwrap();
    std::fs::write(checkout.join(".devcarry/bundle.tar.gz"), "a bundle\n").unwrap();
    for d in ["lib", "harness", "bench", "bundle"] {
        std::fs::create_dir_all(checkout.join("cuda").join(d)).unwrap();
    }
    checkout.join("cuda/harness")
}

/// gpu-session.sh's `invariant` phase runs inv-parity, then the benchmark modes it is asked for in
/// order, each on the shapes of INV_SHAPES: INV_MODES lists them (the next GPU call runs inv-bench
/// and inv-tune in one call), INV_TUNE=1 still means inv-tune alone, and the default is inv-bench;
/// INV_MARLIN=1 adds Marlin after them (another value: exit 2). A stand-in build.sh builds a stand-in harness that records
/// its arguments.
#[test]
fn gpu_session_invariant_runs_the_modes_it_is_given_in_order() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    let log = f.t().join("harness.log");
    let qmv = state.join("mlx-cuda-bundle/mlx/mlx/backend/cuda/quantized/qmm/qmv.cu");
    std::fs::create_dir_all(qmv.parent().unwrap()).unwrap();
    std::fs::write(&qmv, "// kernels\n").unwrap();
    let harness = unpacked_checkout(&state, &checkout);
    std::fs::copy(
        workspace().join("cuda/harness/summarize.py"),
        harness.join("summarize.py"),
    )
    .unwrap();
    std::fs::write(harness.join("main.cu"), "// the harness\n").unwrap();
    std::fs::write(harness.join("harness.cuh"), "// its header\n").unwrap();
    let stub = f.t().join("stub_harness");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\necho '{}'\n",
            log.display(),
            r#"{"kind":"bench","dtype":"bfloat16","bits":4,"gs":64,"n":8,"k":64,"m":1,"arm":"invariant","us":1.0,"bytes":8}"#
        ),
    )
    .unwrap();
    std::fs::write(
        harness.join("build.sh"),
        format!(
            "mkdir -p \"$5\" && cp {} \"$5/qmv_harness\" && chmod +x \"$5/qmv_harness\"\n",
            stub.display()
        ),
    )
    .unwrap();
    let run = |envs: &[(&str, &str)]| {
        std::fs::create_dir_all(&out_dir).unwrap();
        let _ = std::fs::remove_file(&log);
        let mut c = Command::new("bash");
        c.arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("invariant")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .env_remove("INV_MODES")
            .env_remove("INV_TUNE")
            .env_remove("INV_SHAPES")
            .env_remove("INV_MARLIN");
        for (k, v) in envs {
            c.env(k, v);
        }
        let out = f.out(c.output().unwrap()).code(0);
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        (calls, out)
    };
    let (calls, out) = run(&[("INV_MODES", "inv-bench inv-tune"), ("INV_SHAPES", "2 4")]);
    assert_eq!(
        calls,
        "inv-parity\ninv-bench 2 4\ninv-tune 2 4\n",
        "{}",
        out.snapshot()
    );
    for mode in ["inv-bench", "inv-tune"] {
        let rows = std::fs::read_to_string(out_dir.join(format!("{mode}.jsonl"))).unwrap();
        assert!(rows.contains("\"arm\":\"invariant\""), "{mode}: {rows}");
    }
    let (calls, out) = run(&[("INV_TUNE", "1")]);
    assert_eq!(calls, "inv-parity\ninv-tune\n", "{}", out.snapshot());
    let (calls, out) = run(&[]);
    assert_eq!(calls, "inv-parity\ninv-bench\n", "{}", out.snapshot());
    assert!(!out_dir.join("marlin.jsonl").exists(), "{}", out.snapshot());

    // INV_MARLIN=1: Marlin built from the bundle's pinned file (a stand-in nvcc on PATH writes a
    // stand-in marlin_bench that records its arguments), run after the modes on INV_SHAPES, and
    // the kernel's rows and Marlin's in one results.json.
    let pinned = state.join("mlx-cuda-bundle/deps/marlin/marlin/marlin_cuda_kernel.cu");
    std::fs::create_dir_all(pinned.parent().unwrap()).unwrap();
    std::fs::write(&pinned, "// marlin\n").unwrap();
    for (d, file) in [("bundle", "nvcc-flags.sh"), ("bench", "collect.py")] {
        std::fs::copy(
            workspace().join("cuda").join(d).join(file),
            checkout.join("cuda").join(d).join(file),
        )
        .unwrap();
    }
    let marlin_stub = f.t().join("stub_marlin");
    std::fs::write(
        &marlin_stub,
        format!(
            "#!/bin/sh\necho \"marlin $*\" >> {}\necho '{}'\n",
            log.display(),
            r#"{"kind":"bench","arm":"marlin","dtype":"float16","bits":4,"gs":128,"n":8,"k":64,"m":1,"us":2.0,"bytes":8,"row0_bit_identical":true,"rows_differ":0}"#
        ),
    )
    .unwrap();
    let bin = f.t().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(
        &bin.join("nvcc"),
        &format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && o=$2; shift; done\ncp {} \"$o\" && chmod +x \"$o\"\n",
            marlin_stub.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let (calls, out) = run(&[("INV_MARLIN", "1"), ("INV_SHAPES", "2 4"), ("PATH", &path)]);
    assert_eq!(
        calls,
        "inv-parity\ninv-bench 2 4\nmarlin 2 4\n",
        "{}",
        out.snapshot()
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).unwrap()).unwrap();
    let row = &results["rows"][0];
    assert_eq!(row["arms"]["invariant"], 1.0, "{results}");
    assert_eq!(row["arms"]["marlin"], 2.0, "{results}");
    assert_eq!(row["rows_differ"]["marlin"], 0, "{results}");

    // An INV_MARLIN that is neither 0 nor 1: exit 2 naming it, before the harness runs.
    let _ = std::fs::remove_file(&log);
    let out = Command::new("bash")
        .arg(workspace().join("cuda/machine/gpu-session.sh"))
        .arg("invariant")
        .current_dir(&checkout)
        .env("GPU_SESSION_DIR", &state)
        .env("OUT", &out_dir)
        .env("INV_MARLIN", "yes")
        .output()
        .unwrap();
    let out = f.out(out).code(2);
    assert!(
        out.stderr
            .contains("INV_MARLIN is 1 (Marlin after the modes) or 0, not 'yes'"),
        "{}",
        out.snapshot()
    );
    assert!(!log.exists(), "the harness ran: {}", out.snapshot());
}

/// gpu-session.sh's `sdpa` phase builds sdpa_rows alone (SDPA_ONLY=1) and runs it with SDPA_KL,
/// its records in sdpa-rows.jsonl; a failing check (the program's exit 1) fails the phase.
#[test]
fn gpu_session_sdpa_builds_and_runs_the_rows_check() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    let harness = unpacked_checkout(&state, &checkout);
    let stub = f.t().join("stub_sdpa");
    write_executable(
        &stub,
        "#!/bin/sh\necho \"{\\\"kind\\\":\\\"sdpa_rows_check\\\",\\\"k_len\\\":$1}\"\nexit $SDPA_RC\n",
    );
    std::fs::write(
        harness.join("build.sh"),
        format!(
            "[ \"$SDPA_ONLY\" = 1 ] || exit 3\nmkdir -p \"$5\" && cp {} \"$5/sdpa_rows\"\n",
            stub.display()
        ),
    )
    .unwrap();
    let run = |rc: &str| {
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = Command::new("bash")
            .arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("sdpa")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .env("SDPA_KL", "4112")
            .env("SDPA_RC", rc)
            .output()
            .unwrap();
        f.out(out)
    };
    let out = run("0").code(0);
    let rows = std::fs::read_to_string(out_dir.join("sdpa-rows.jsonl")).unwrap();
    assert_eq!(
        rows,
        "{\"kind\":\"sdpa_rows_check\",\"k_len\":4112}\n",
        "{}",
        out.snapshot()
    );
    let out = run("1").code(1);
    assert!(out.stdout.contains("sdpa_rows rc=1"), "{}", out.snapshot());
}

/// gpu-session.sh's `bench` phase times the library one call at a time (`qmv_lib serial`, CUDA
/// graphs off) first, then parity, then throughput (`qmv_lib bench`), both on BENCH_SHAPES; it files both
/// arms in results.json; SKIP_HARNESS leaves the kernel harness out (neither built nor run). A
/// stand-in qmv_lib records its arguments.
#[test]
fn gpu_session_bench_times_serial_first_then_throughput() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    let log = f.t().join("qmv_lib.log");
    unpacked_checkout(&state, &checkout);
    let bundle = state.join("mlx-cuda-bundle/cuda");
    for (d, file) in [("harness", "summarize.py"), ("bench", "collect.py")] {
        std::fs::create_dir_all(bundle.join(d)).unwrap();
        std::fs::copy(
            workspace().join("cuda").join(d).join(file),
            bundle.join(d).join(file),
        )
        .unwrap();
    }
    let row = |arm: &str, us: f64| {
        format!(
            r#"{{"kind":"bench","dtype":"bfloat16","bits":4,"gs":64,"n":8,"k":64,"m":1,"arm":"{arm}","us":{us},"host_us":0.5,"bytes":8}}"#
        )
    };
    std::fs::create_dir_all(state.join("lib")).unwrap();
    write_executable(
        &state.join("lib/qmv_lib"),
        &format!(
            "#!/bin/sh\necho \"$*\" >> {}\ncase $1 in\n  parity) echo '{}' ;;\n  serial) echo '{}' ;;\n  bench) echo '{}' ;;\nesac\n",
            log.display(),
            r#"{"kind":"lib_parity","checked":1,"streamed_differ":0,"invariant_differ":0,"upstream_differ":1}"#,
            row("lib_invariant_serial", 2.0),
            row("lib_invariant", 1.0)
        ),
    );
    std::fs::write(state.join("built"), "").unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    // `gpu-session.sh bench` on the stand-in, with `vars` beside the state and OUT.
    let bench = |vars: &[(&str, &str)]| {
        let mut c = Command::new("bash");
        c.arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("bench")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .envs(vars.iter().copied());
        f.out(c.output().unwrap())
    };
    let out = bench(&[
        ("BENCH_SHAPES", "2 4"),
        ("SKIP_PEERS", "1"),
        ("SKIP_MARLIN", "1"),
        ("SKIP_HARNESS", "1"),
    ])
    .code(0);
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        calls,
        "serial 2 4\nparity\nbench 2 4\n",
        "{}",
        out.snapshot()
    );
    assert!(
        out.stdout
            .contains("kernel bench: skipped (SKIP_HARNESS is set)"),
        "{}",
        out.snapshot()
    );
    assert!(!out_dir.join("harness-build.log").exists());
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).unwrap()).unwrap();
    let arms = &results["rows"][0]["arms"];
    assert_eq!(arms["lib_invariant_serial"], 2.0, "{results}");
    assert_eq!(arms["lib_invariant"], 1.0, "{results}");

    // A LIB_RUNS word that is not a run: exit 2 naming it, before any run, lib.jsonl as it was.
    std::fs::remove_file(&log).unwrap();
    let before = std::fs::read(out_dir.join("lib.jsonl")).unwrap();
    let out = bench(&[("LIB_RUNS", "serial nope"), ("SKIP_MARLIN", "1")]).code(2);
    assert!(
        out.stderr
            .contains("LIB_RUNS: serial, parity or bench, not 'nope'"),
        "{}",
        out.snapshot()
    );
    assert!(!log.exists(), "a run started: {}", out.snapshot());
    assert_eq!(std::fs::read(out_dir.join("lib.jsonl")).unwrap(), before);
}

/// cuda/harness/sass_mix.py on a small `cuobjdump -sass` dump: per kernel, the smallest loop (a
/// backward branch's range) that holds an HMMA, with its opcodes counted; a kernel without one
/// says `"loop": null`; the name filter keeps only what it matches.
#[test]
fn sass_mix_counts_the_innermost_loop_that_holds_hmma() {
    let f = Fixture::new(&[("a", "a\n")]);
    let dump = f.t().join("dump.sass");
    let line =
        |a: u32, i: &str| format!("        /*{a:04x}*/                   {i} ;   /* 0x0 */\n");
    let mut text = String::from("\tcode for sm_90a\n\t\tFunction : _Z4mmasPf\n");
    for (a, i) in [
        (0x00, "MOV R1, c[0x0][0x28]"),
        (0x10, "LOP3.LUT R2, R3, 0xf, RZ, 0xc0, !PT"),
        (0x20, "HMMA.16816.F32.BF16 R4, R8, R12, R4"),
        (0x30, "FFMA R5, R6, R7, R5"),
        (0x40, "@!P0 BRA 0x20"),
        (0x50, "HMMA.16816.F32.BF16 R4, R8, R12, R4"),
        (0x60, "@P1 BRA 0x10"),
        (0x70, "@P2 BRA 0x70"),
        (0x80, "EXIT"),
    ] {
        text.push_str(&line(a, i));
    }
    text.push_str("\t\tFunction : _Z4nonePf\n");
    text.push_str(&line(0x00, "FFMA R5, R6, R7, R5"));
    text.push_str(&line(0x10, "@P0 BRA 0x0"));
    std::fs::write(&dump, text).unwrap();
    let run = |filter: Option<&str>| {
        let mut c = Command::new("python3");
        c.arg(workspace().join("cuda/harness/sass_mix.py"))
            .arg(&dump);
        if let Some(p) = filter {
            c.arg(p);
        }
        let out = f.out(c.output().unwrap()).code(0);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    let rows = run(None);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let lp = &rows[0]["loop"];
    assert_eq!(rows[0]["instructions"], 9);
    assert_eq!(lp["instructions"], 3, "{lp}");
    assert_eq!(lp["hmma"], 1);
    assert_eq!(
        lp["mix"],
        serde_json::json!({"HMMA": 1, "FFMA": 1, "BRA": 1})
    );
    assert_eq!(rows[0]["hmma_loops"], serde_json::json!([3, 6]));
    assert!(rows[1]["loop"].is_null(), "{}", rows[1]);
    let only = run(Some("none"));
    assert_eq!(only.len(), 1);
    assert!(only[0]["kernel"].as_str().unwrap().contains("none"));

    // Bad input: no dump, a missing one, a bad pattern: a message naming it, exit 2, no rows.
    let script = workspace().join("cuda/harness/sass_mix.py");
    let missing = f.t().join("missing.sass");
    for (args, says) in [
        (vec![], "python3 sass_mix.py DUMP"),
        (vec![missing.display().to_string()], "missing.sass"),
        (
            vec![dump.display().to_string(), "(".to_string()],
            "not a regular expression",
        ),
    ] {
        let out = f
            .out(
                Command::new("python3")
                    .arg(&script)
                    .args(&args)
                    .output()
                    .unwrap(),
            )
            .code(2);
        assert!(out.stderr.contains(says), "{}", out.snapshot());
        assert!(out.stdout.is_empty(), "{}", out.snapshot());
    }
}

/// cuda/bench/raw_jsonl.py: the env line first (collect.py's header and the call's description),
/// then every JSON line of the inputs in order, a summary table's lines left out and counted; bad
/// input (a missing env.txt or input, an input without JSON, an env.txt that is not one) is a
/// message naming the file, exit 2, and the output file as it was.
#[test]
fn raw_jsonl_puts_the_machine_first_and_keeps_every_record() {
    let f = Fixture::new(&[("a", "a\n")]);
    let t = f.t();
    let env = t.join("env.txt");
    std::fs::write(
        &env,
        "index, name, driver_version, clocks.max.sm [MHz]\n0, NVIDIA H200, 580.159.04, 1980 MHz\n\
         Cuda compilation tools, release 13.0, V13.0.88\ncmake version 4.4.3\n",
    )
    .unwrap();
    let a = t.join("a.jsonl");
    std::fs::write(&a, "{\"kind\":\"inv_parity\",\"differ\":0}\n\n").unwrap();
    let b = t.join("b.jsonl");
    std::fs::write(
        &b,
        "{\"kind\":\"bench\",\"us\":1.5}\nbits n k m invariant\n{\"kind\":\"bench\",\"us\":2.5}\n",
    )
    .unwrap();
    let script = workspace().join("cuda/bench/raw_jsonl.py");
    let out = t.join("raw.jsonl");
    let run = |args: &[&Path]| {
        let mut c = Command::new("python3");
        c.arg(&script).arg(&out).arg(args[0]).arg("call 1: parity");
        f.out(c.args(&args[1..]).output().unwrap())
    };
    let done = run(&[&env, &a, &b]).code(0);
    assert!(
        done.stderr.contains("b.jsonl: 1 line(s) not JSON"),
        "{}",
        done.snapshot()
    );
    let lines: Vec<serde_json::Value> = f
        .read(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    let head = &lines[0];
    assert_eq!(
        (&head["kind"], &head["gpu"], &head["driver"], &head["what"]),
        (
            &"env".into(),
            &"NVIDIA H200".into(),
            &"580.159.04".into(),
            &"call 1: parity".into()
        )
    );
    assert_eq!(
        head["nvcc"],
        "Cuda compilation tools, release 13.0, V13.0.88"
    );
    assert_eq!(head["clocks"]["clocks.max.sm [MHz]"], "1980 MHz");
    assert_eq!(lines[1]["kind"], "inv_parity");
    assert_eq!(
        (&lines[2]["us"], &lines[3]["us"]),
        (&1.5.into(), &2.5.into())
    );

    let kept = f.read(&out);
    let table = t.join("table.txt");
    std::fs::write(&table, "bits n k m invariant\n").unwrap();
    let missing = t.join("missing.jsonl");
    for (args, says) in [
        (vec![&missing, &a], "missing.jsonl"),
        (vec![&env, &missing], "missing.jsonl"),
        (vec![&env, &a, &table], "table.txt: no JSON line"),
        (vec![&a, &a], "a.jsonl:2: no GPU name"),
        (vec![&table, &a], "table.txt: no nvidia-smi CSV header"),
    ] {
        let args: Vec<&Path> = args.iter().map(|p| p.as_path()).collect();
        let failed = run(&args).code(2);
        assert!(
            failed.stderr.contains(says),
            "{says}: {}",
            failed.snapshot()
        );
        assert_eq!(f.read(&out), kept, "{says}");
    }
}

/// cuda/harness/build.sh with a stand-in nvcc that records its calls, for sm_100a, with `env`
/// set: the calls, one per line.
fn harness_build_calls(env: &[(&str, &str)]) -> String {
    let f = Fixture::new(&[("a", "a\n")]);
    let tree = f.t().join("tree");
    let qmv = tree.join("mlx/backend/cuda/quantized/qmm/qmv.cu");
    std::fs::create_dir_all(qmv.parent().unwrap()).unwrap();
    std::fs::write(&qmv, "// kernels\n} // namespace cu\n// host\n").unwrap();
    std::fs::write(
        tree.join("mlx/backend/cuda/scaled_dot_product_attention.cu"),
        "// sdpa kernels\n} // namespace cu\n// sdpa host\n",
    )
    .unwrap();
    let log = f.t().join("nvcc.log");
    let nvcc = f.t().join("nvcc");
    std::fs::write(
        &nvcc,
        format!("#!/bin/sh\necho \"$*\" >> {}\n", log.display()),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&nvcc).status().unwrap();
    let out_dir = f.t().join("out");
    let out = Command::new("bash")
        .arg(workspace().join("cuda/harness/build.sh"))
        .args([
            &tree,
            &f.t().join("cutlass"),
            &f.t().join("cccl"),
            &f.t().join("fmt"),
            &out_dir,
        ])
        .env("NVCC", &nvcc)
        .env("ARCH", "sm_100a")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    f.out(out).code(0);
    std::fs::read_to_string(&log).unwrap()
}

/// cuda/harness/build.sh end to end: every unit compiled with the one flag list
/// (cuda/bundle/nvcc-flags.sh) for the architecture asked, and the link line for the same
/// architecture. The link line once named a variable the flag-list change had dropped (`set -u`
/// stopped the script on the GPU machine after every compile had run).
#[test]
fn harness_build_compiles_and_links_for_one_architecture() {
    let calls = harness_build_calls(&[]);
    let lines: Vec<&str> = calls.lines().collect();
    // main, peak, 4 parity units, 12 invariant units, the link.
    assert_eq!(lines.len(), 19, "{calls}");
    for l in &lines {
        assert!(l.contains("-gencode=arch=compute_100a,code=sm_100a"), "{l}");
    }
    let compiles = lines.iter().filter(|l| l.contains(" -c ")).count();
    assert_eq!(compiles, 18, "{calls}");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains(" -c ") || l.contains("--extended-lambda")),
        "{calls}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("-o ") && l.contains("qmv_harness")),
        "{calls}"
    );
}

/// WGMMA_ONLY=1 builds the warpgroup-mma prototype alone: one nvcc call, wgmma.cu into
/// qmv_wgmma, with the flag list for the architecture asked (and PROFILE_ONLY=1 profile.cu alone;
/// SDPA_ONLY=1 sdpa_rows.cu alone, beside the attention unit's kernels as a header).
#[test]
fn harness_build_builds_one_target_alone_when_asked() {
    for (var, unit, target) in [
        ("WGMMA_ONLY", "wgmma.cu", "qmv_wgmma"),
        ("PROFILE_ONLY", "profile.cu", "qmv_profile"),
        ("SDPA_ONLY", "sdpa_rows.cu", "sdpa_rows"),
    ] {
        let calls = harness_build_calls(&[(var, "1")]);
        let lines: Vec<&str> = calls.lines().collect();
        assert_eq!(lines.len(), 1, "{var}: {calls}");
        let l = lines[0];
        assert!(l.contains("-gencode=arch=compute_100a,code=sm_100a"), "{l}");
        assert!(l.contains("--extended-lambda"), "{l}");
        assert!(l.ends_with(&format!("/{unit}")), "{l}");
        assert!(l.contains(&format!("/{target} ")), "{l}");
    }
}

/// cuda/machine/ninja_times.py: a build resumed in a second command is two runs, each with its
/// wall time, its longest edges and the one that ended last; an edge's several outputs count
/// once; a file that is not Ninja's log, or a line that is not an edge, is exit 2 naming its line.
#[test]
fn ninja_times_splits_resumed_runs_and_names_the_last_unit() {
    let f = Fixture::new(&[("a", "a\n")]);
    let log = f.t().join("ninja_log");
    let lines = [
        "# ninja log v5",
        "0\t1000\t0\ta.o\th1",
        "5\t2000\t0\tb.o\th2",
        // One edge, two outputs: counted once.
        "0\t300000\t0\tqmv.cu.o\th3",
        "0\t300000\t0\tqmv.cu.d\th3",
        // Ended a little before the line above: logged out of order, the same run.
        "2000\t299500\t0\tc.o\th4",
        // The resumed build: its times start again.
        "0\t500\t0\td.o\th5",
        "10\t40000\t0\te.o\th6",
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let script = workspace().join("cuda/machine/ninja_times.py");
    let run = |args: &[&str]| {
        let mut c = Command::new("python3");
        f.out(c.arg(&script).arg(&log).args(args).output().unwrap())
    };
    let out = run(&["2"]).code(0);
    let s = &out.stdout;
    assert!(
        s.contains("ninja run 1 of 2: 4 edges, 300.0 s wall, 600.5 s of edges (2.0 busy"),
        "{}",
        out.snapshot()
    );
    assert!(s.contains("  300.0 s  qmv.cu.o  (ended at 300.0 s)"), "{s}");
    assert!(s.contains("  297.5 s  c.o"), "{s}");
    assert!(!s.contains("b.o"), "two longest only: {s}");
    assert!(
        s.contains("last to end: qmv.cu.o (300.0 s, from 0.0 s)"),
        "{s}"
    );
    assert!(s.contains("ninja run 2 of 2: 2 edges, 40.0 s wall"), "{s}");
    assert!(s.contains("last to end: e.o (40.0 s, from 0.0 s)"), "{s}");

    for (text, says) in [
        ("0\t1\t0\ta.o\th\n", ":1: not a Ninja log"),
        (
            "# ninja log v5\n0\t1\t0\ta.o\th\nx\t1\t0\tb.o\th\n",
            ":3: expected",
        ),
    ] {
        std::fs::write(&log, text).unwrap();
        let failed = run(&[]).code(2);
        assert!(
            failed.stderr.contains(says),
            "{says}: {}",
            failed.snapshot()
        );
    }
    let usage = run(&["many"]).code(2);
    assert!(usage.stderr.contains("usage"), "{}", usage.snapshot());
}
