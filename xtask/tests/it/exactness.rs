//! `exactness --from FILE`: rendering runs written elsewhere (the CUDA bundle's probe), the
//! promise table and the negative control. The real probe on the CPU build runs in `.ci/run`
//! (`cargo xtask exactness`), and its C++ is exercised by mlx-sys's tests.

use serde_json::{Value, json};

use crate::fixture::{Fixture, Out};

fn op(name: &str, differ: u64) -> Value {
    json!({"op": name, "dtype": "bf16", "params": {"bits": 4, "group_size": 64},
           "t_max": 2, "seeds": 1, "rows": 3, "rows_differ": differ,
           "first_t": if differ > 0 { json!(2) } else { Value::Null }})
}

fn run(policy: &str, perturbed: bool, ops: Vec<Value>) -> Value {
    let identical = if perturbed { 1 } else { 2 };
    json!({"policy": policy, "paths": null, "probe": {
        "probe": 1, "device": "gpu", "perturbed": perturbed, "ops": ops,
        "decoder": {"preset": "small", "dims": {"layers": 4, "d_model": 512}, "dtype": "bf16",
            "dense_head": false, "prompt": 8, "seed": 0, "decoded": [5, 6, 7], "seconds": 1.5,
            "blocks": [{"k": 2, "logit_rows": 2, "logit_rows_identical": identical, "tokens_same": 2,
                "first_diff": if perturbed { json!({"row": 0, "layer": null, "op": "logits"}) }
                              else { Value::Null }}]}}})
}

fn write(f: &Fixture, lines: &[Value]) -> String {
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    let path = f.root.join("runs.jsonl");
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    path.display().to_string()
}

/// `exactness --backend cuda --from FILE` (`--json` first when asked), its exit code checked.
fn from_cuda(f: &Fixture, file: &str, json: bool, code: i32) -> Out {
    let args = ["--json", "exactness", "--backend", "cuda", "--from", file];
    f.xtask(&args[usize::from(!json)..]).code(code)
}

fn fixture() -> Fixture {
    Fixture::new(&[("src/lib.c", "int a;\n")])
}

#[test]
fn promised_rows_identical_and_control_caught_exit_0() {
    let f = fixture();
    let file = write(
        &f,
        &[
            run(
                "streamed",
                false,
                vec![op("quantized_matmul", 0), op("matmul", 5)],
            ),
            run(
                "upstream",
                false,
                vec![op("quantized_matmul", 3), op("matmul", 5)],
            ),
            run(
                "streamed",
                true,
                vec![op("quantized_matmul", 1), op("matmul", 1)],
            ),
        ],
    );
    let out = from_cuda(&f, &file, false, 0);
    assert!(
        out.stdout.contains("every promised row is identical"),
        "{}",
        out.stdout
    );
    // CUDA promises no dense matmul: its differing rows are reported, not findings.
    assert!(
        out.stdout.contains("5/3 rows differ, from T=2 (reported)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("caught in 2 of 2 op cases, 1 of 1 decoder blocks"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_promised_row_that_differs_is_a_finding_in_text_and_json() {
    let f = fixture();
    let file = write(
        &f,
        &[
            run("streamed", false, vec![op("quantized_matmul", 2)]),
            run("streamed", true, vec![op("quantized_matmul", 1)]),
        ],
    );
    let out = from_cuda(&f, &file, false, 1);
    assert!(
        out.stdout.contains(
            "FINDING [streamed] op: quantized_matmul bf16 bits=4 group_size=64: 2 of 3 rows differ"
        ),
        "{}",
        out.stdout
    );
    let out = from_cuda(&f, &file, true, 1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["schema"], 1);
    assert_eq!(v["findings"][0]["kind"], "op");
    assert_eq!(v["runs"][0]["probe"]["ops"][0]["asserted"], true);
}

/// A streamed run with the probe's digests; `step` names decode step 1's logit digest.
fn with_digests(step: &str) -> Value {
    let mut r = run("streamed", false, vec![op("quantized_matmul", 0)]);
    r["probe"]["decoder"]["digests"] = json!({"prefill_kv": ["a1", "b2", "c3", "d4"],
        "prefill_logits": "e5", "decode_logits": [step, "f6"]});
    r
}

/// The same configuration run in two processes must give the same bytes: the second run is
/// compared with the first, and where it first differs is a finding (the twin whose digests
/// agree passes, so the comparison is not vacuous).
#[test]
fn a_repeated_run_that_differs_is_a_finding_placed_by_its_digests() {
    let f = fixture();
    let control = run("streamed", true, vec![op("quantized_matmul", 1)]);
    let same = write(
        &f,
        &[with_digests("aa"), with_digests("aa"), control.clone()],
    );
    let out = from_cuda(&f, &same, false, 0);
    // (Each run is named by its file and line; the fixture writes the temporary folder $TMP.)
    assert!(
        out.stdout
            .contains("streamed, small decoder at prompt 8, seed 0: runs 1 (")
            && out
                .stdout
                .contains("runs.jsonl:2) (digests and tokens): identical"),
        "{}",
        out.stdout
    );
    let differ = write(&f, &[with_digests("aa"), with_digests("ab"), control]);
    let out = from_cuda(&f, &differ, false, 1);
    assert!(
        out.stdout.contains(
            "FINDING [streamed] repeat: 2 runs of the small decoder at prompt 8, seed 0: run 2 ("
        ) && out.stdout.contains(
            "runs.jsonl:2) differs from run 1 ($TMP/project/runs.jsonl:1), first at decode step 1's logit row"
        ),
        "{}",
        out.stdout
    );
    let out = from_cuda(&f, &differ, true, 1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["findings"][0]["kind"], "repeat");
    assert_eq!(v["repeats"][0]["runs"], json!([1, 2]));
    assert_eq!(v["repeats"][0]["digests"], true);
    assert_eq!(
        v["runs"][1]["probe"]["decoder"]["digests"]["decode_logits"][0],
        "ab"
    );
    // Several files are read as one: the same runs split over two files are compared across
    // them, each named by its file and line; a missing second file is an error (exit 2).
    let second = f.root.join("second.jsonl");
    std::fs::write(&second, format!("{}\n", with_digests("ab"))).unwrap();
    let first = write(
        &f,
        &[
            with_digests("aa"),
            run("streamed", true, vec![op("quantized_matmul", 1)]),
        ],
    );
    let second = second.to_str().unwrap();
    let args = ["exactness", "--backend", "cuda", "--from", &first, second];
    let out = f.xtask(&args).code(1);
    assert!(
        out.stdout.contains(
            "run 2 ($TMP/project/second.jsonl:1) differs from run 1 ($TMP/project/runs.jsonl:1), first at decode step 1's logit row"
        ),
        "{}",
        out.stdout
    );
    let missing = f.root.join("missing.jsonl");
    let args = [
        "exactness",
        "--backend",
        "cuda",
        "--from",
        &first,
        missing.to_str().unwrap(),
    ];
    let out = f.xtask(&args).code(2);
    assert!(out.stderr.contains("missing.jsonl"), "{}", out.stderr);
}

/// A CUDA probe built with CUPTI adds the forward's GPU time to its timing rows: rendered as a
/// table of its own, each k over the same run's k = 1; the time with each graph launch taken
/// whole (a later probe's) as another; rows without them render no such table.
#[test]
fn timing_rows_with_gpu_time_render_it_over_k_1() {
    let f = fixture();
    // 0: no GPU figures, 1: busy time only (session 34's probe), 2: the graph launches' too.
    let timed = |gpu: u8| {
        let row = |k: u32, wall: f64, busy: f64, qmm: f64, graph: f64, graphs: u64| {
            let mut r = json!({"k": k, "forward_ms": wall, "sdpa_ms": 0.01});
            if gpu > 0 {
                r["gpu_ms"] = json!(busy);
                r["gpu_qmm_ms"] = json!(qmm);
                r["gpu_kernels"] = json!(400);
            }
            if gpu > 1 {
                r["gpu_graph_ms"] = json!(graph);
                r["gpu_graphs"] = json!(graphs);
                // Attention grows more than the matmuls; the copy kernel is named at k = 1 only.
                // k = 1 in the first probe's form ([name, ms]), k = 16 with launches.
                let attention = if k == 1 { 0.1 } else { 0.5 };
                let entry = |name: &str, ms: f64, launches: u64| match k {
                    1 => json!([name, ms]),
                    _ => json!([name, ms, launches]),
                };
                let mut names = vec![entry("mlx::core::cu::qmv_wgmma_kernel", qmm, 196)];
                names.push(entry("mlx::core::cu::sdpa_vector", attention, 28));
                if k == 1 {
                    names.push(entry("copy_kernel", 0.05, 56));
                }
                names.push(entry("(others)", 0.2, 300));
                r["gpu_by_kernel"] = json!(names);
            }
            r
        };
        let mut r = run("invariant", false, vec![]);
        r["probe"]["decoder"]["timing"] = json!({"reps": 5, "rows": [
            row(1, 6.0, 2.0, 1.5, 2.4, 6),
            row(16, 7.0, 2.5, 1.8, 3.3, 7)
        ]});
        // Session 36's probe says where the token ids lived; older ones built them on the host.
        if gpu > 1 {
            r["probe"]["decoder"]["timing"]["tokens"] = json!("device");
        }
        r
    };
    // The timed run beside a caught control, rendered.
    let render = |gpu: u8| {
        let lines = [
            timed(gpu),
            run("streamed", true, vec![op("quantized_matmul", 1)]),
        ];
        let file = write(&f, &lines);
        from_cuda(&f, &file, false, 0).stdout
    };
    let out = render(2);
    assert!(out.contains("GPU time (same forwards)"), "{out}");
    assert!(!out.contains("token ids built from host data"), "{out}");
    assert!(
        out.contains("2.500 ms, qmm 1.800 ms (1.25x, 1.20x)"),
        "{out}"
    );
    assert!(out.contains("each graph launch whole"), "{out}");
    assert!(out.contains("3.300 ms in 7 launches (1.38x)"), "{out}");
    // Per kernel name, k = 1 and k = 16: the largest growth first, "(others)" last, a name
    // one list leaves out shown as "-".
    assert!(out.contains("GPU time by kernel, invariant"), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    let at = |name: &str| lines.iter().position(|l| l.trim_start().starts_with(name));
    let (sdpa, qmv) = (
        at("mlx::core::cu::sdpa_vector"),
        at("mlx::core::cu::qmv_wgmma"),
    );
    let (copy, others) = (at("copy_kernel"), at("(others)"));
    assert!(sdpa < qmv && qmv < copy && copy < others, "{out}");
    let row = |i: Option<usize>| lines[i.unwrap()].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        row(sdpa)[1..],
        ["0.100", "0.500", "+0.400", "-", "28"],
        "{out}"
    );
    assert_eq!(
        row(qmv)[1..],
        ["1.500", "1.800", "+0.300", "-", "196"],
        "{out}"
    );
    assert_eq!(row(copy)[1..], ["0.050", "-", "-", "-", "-"], "{out}");
    let out = render(1);
    assert!(out.contains("2.500 ms, qmm 1.800 ms"), "{out}");
    assert!(!out.contains("graph launch"), "{out}");
    assert!(!out.contains("GPU time by kernel"), "{out}");
    let out = render(0);
    assert!(out.contains("timing (median of 5)"), "{out}");
    assert!(
        out.contains("token ids built from host data in each forward\n"),
        "{out}"
    );
    assert!(!out.contains("GPU time"), "{out}");
    // A file with both: the header names the host run's column.
    let lines = [
        timed(2),
        timed(0),
        run("streamed", true, vec![op("quantized_matmul", 1)]),
    ];
    let file = write(&f, &lines);
    let out = from_cuda(&f, &file, false, 0).stdout;
    assert!(
        out.contains("token ids built from host data in each forward in column(s) 2\n"),
        "{out}"
    );
    assert!(
        out.contains("GPU time by kernel, invariant: k = 1"),
        "{out}"
    );
}

#[test]
fn without_a_caught_control_the_run_cannot_pass() {
    let f = fixture();
    let file = write(
        &f,
        &[run("streamed", false, vec![op("quantized_matmul", 0)])],
    );
    let out = from_cuda(&f, &file, false, 1);
    assert!(
        out.stdout.contains("no negative control run"),
        "{}",
        out.stdout
    );
    // A control the comparison missed (no row reported differing) fails too.
    let file = write(
        &f,
        &[
            run("streamed", false, vec![op("quantized_matmul", 0)]),
            run("streamed", true, vec![op("quantized_matmul", 0)]),
        ],
    );
    let out = from_cuda(&f, &file, false, 1);
    assert!(
        out.stdout.contains("caught in 0 of 1 op cases"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_malformed_line_is_named_and_nothing_is_rendered() {
    let f = fixture();
    let good = run("streamed", false, vec![op("quantized_matmul", 0)]).to_string();
    let path = f.root.join("runs.jsonl");
    std::fs::write(&path, format!("{good}\n{{\"policy\": \"streamed\"}}\n")).unwrap();
    let out = from_cuda(&f, path.to_str().unwrap(), true, 2);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("runs.jsonl:2: not an exactness run"), "{msg}");
    assert_eq!(v["kind"], "input");
}

#[test]
fn cuda_without_a_file_says_where_runs_come_from() {
    let f = fixture();
    let out = f.xtask(&["exactness", "--backend", "cuda"]).code(2);
    assert!(out.stderr.contains("--from FILE"), "{}", out.stderr);
    // Under --json, the one error shape: bad input, with the way out as the hint.
    let out = f
        .xtask(&["--json", "exactness", "--backend", "cuda"])
        .code(2);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["kind"], "input", "{}", out.stdout);
    assert!(
        v["hint"].as_str().unwrap_or("").contains("--from FILE"),
        "{}",
        out.stdout
    );
}

/// The CUDA bundle's `exactness.sh` builds the probe with CMake against an installed MLX and
/// writes lines `--from` renders: run here against the CPU build that README's test command
/// builds first (the GPU machine runs the same script against the CUDA install).
#[test]
fn the_bundle_script_builds_the_probe_and_its_lines_render() {
    let ws = crate::fixture::workspace();
    let info = ws.join("target/mlx/build-info.json");
    let info: Value = serde_json::from_slice(&std::fs::read(&info).unwrap_or_else(|e| {
        panic!(
            "{} ({e}): run `cargo xtask build-mlx` first, as README's test command does",
            info.display()
        )
    }))
    .unwrap();
    let prefix = std::path::Path::new(info["lib_dir"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let f = fixture();
    // exactness.sh OUT SPEC under POLICIES, with the control unless CONTROL=0; its lines.
    let script = |out: &std::path::Path, spec: &str, policies: &str, control: &str| {
        let status = std::process::Command::new("bash")
            .arg(ws.join("cuda/bundle/exactness.sh"))
            .arg(out)
            .arg(spec)
            .env("INSTALL_DIR", &prefix)
            .env("PROBE_SRC", ws.join("crates/mlx-sys/probe"))
            .env("PROBE_BUILD", f.root.join("build-probe"))
            .env("POLICIES", policies)
            .env("CONTROL", control)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::read_to_string(out).unwrap()
    };
    let out = f.root.join("runs.jsonl");
    let spec = "preset=small;layers=1;prompt=4;k_max=2;t_max=2;seeds=1;kv_lens=64";
    let lines = script(&out, spec, "streamed upstream", "1");
    assert_eq!(lines.lines().count(), 3, "{lines}");
    assert!(
        lines.contains("\"MLX_CPU_QMM_T_POLICY\":\"upstream\""),
        "{lines}"
    );
    let out = f
        .xtask(&["exactness", "--from", out.to_str().unwrap()])
        .code(0);
    assert!(
        out.stdout.contains("caught in 78 of 78 op cases"),
        "{}",
        out.stdout
    );
    assert!(!f.root.join("runs.jsonl.partial").exists());
    // CONTROL=0 (another run of the session has the control): the measured lines only.
    let one = f.root.join("one.jsonl");
    let decoder_only = DECODER_ONLY;
    let lines = script(&one, decoder_only, "streamed", "0");
    assert_eq!(lines.lines().count(), 1, "{lines}");
    assert!(!lines.contains("\"perturbed\":true"), "{lines}");
    // The same spec in another process gives the same digests; another seed, other ones (so
    // the comparison can fail), and `--from` over both processes' lines reports them identical.
    let digests = line_digests;
    let two = f.root.join("two.jsonl");
    let again = script(&two, decoder_only, "streamed", "0");
    assert_eq!(digests(&again), digests(&lines), "{again}");
    assert_eq!(digests(&lines)["prefill_kv"].as_array().unwrap().len(), 1);
    let seeded = f.root.join("seeded.jsonl");
    let other = script(&seeded, &format!("{decoder_only};seed=1"), "streamed", "0");
    let (a, b) = (digests(&lines), digests(&other));
    for key in ["prefill_kv", "prefill_logits", "decode_logits"] {
        assert_ne!(a[key], b[key], "{key}: {a} {b}");
    }
    let control = std::fs::read_to_string(f.root.join("runs.jsonl")).unwrap();
    let control = control
        .lines()
        .find(|l| l.contains("\"perturbed\":true"))
        .unwrap();
    let both = f.root.join("both.jsonl");
    std::fs::write(&both, format!("{lines}{again}{control}\n")).unwrap();
    let out = f
        .xtask(&["exactness", "--from", both.to_str().unwrap()])
        .code(0);
    assert!(
        out.stdout
            .contains("both.jsonl:2) (digests and tokens): identical"),
        "{}",
        out.stdout
    );
    let sdpa = tap_digests_are_compared(&f, &script, &digests(&lines)["prefill_kv"], control);
    repeats_are_compared(&f, &script, control, sdpa);
}

/// `exactness.sh OUT SPEC POLICIES CONTROL`'s lines (the test's closure).
type Script<'a> = dyn Fn(&std::path::Path, &str, &str, &str) -> String + 'a;

/// The probe's lines of `spec` under the streamed policy, no control, in the file NAME.
fn probe_lines(f: &Fixture, script: &Script, name: &str, spec: &str) -> String {
    script(&f.root.join(name), spec, "streamed", "0")
}

/// `exactness --from` over `text` written to the file NAME, with the exit code expected.
fn render(f: &Fixture, name: &str, text: &str, code: i32) -> String {
    let file = f.root.join(name);
    std::fs::write(&file, text).unwrap();
    f.xtask(&["exactness", "--from", file.to_str().unwrap()])
        .code(code)
        .stdout
}

fn line_digests(text: &str) -> Value {
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    v["probe"]["decoder"]["digests"].clone()
}

const DECODER_ONLY: &str = "preset=small;layers=1;prompt=4;k_max=2;ops=0";

/// taps=1: every op's output digested too (15 taps a layer, the final norm, the logits; in the
/// prompt's forward and each decode step), the same in another process, the coarse digests
/// (`kv`, of a run without taps) unchanged, each one other under another seed; one altered tap
/// digest is placed at its op. Returns the index of the tap `0/sdpa`.
fn tap_digests_are_compared(f: &Fixture, script: &Script, kv: &Value, control: &str) -> usize {
    let tapped = format!("{DECODER_ONLY};taps=1");
    let t1 = probe_lines(f, script, "t1.jsonl", &tapped);
    let t2 = probe_lines(f, script, "t2.jsonl", &tapped);
    let d = line_digests(&t1);
    assert_eq!(d, line_digests(&t2));
    let names = d["taps"].as_array().unwrap();
    assert_eq!(names.len(), 17, "{d}");
    assert_eq!(d["prefill_taps"].as_array().unwrap().len(), 17);
    assert_eq!(d["decode_taps"].as_array().unwrap().len(), 2);
    assert_eq!(&d["prefill_kv"], kv);
    let o = line_digests(&probe_lines(
        f,
        script,
        "t3.jsonl",
        &format!("{tapped};seed=1"),
    ));
    let all = |v: &Value| -> Vec<Value> {
        let mut out = v["prefill_taps"].as_array().unwrap().clone();
        for step in v["decode_taps"].as_array().unwrap() {
            out.extend(step.as_array().unwrap().iter().cloned());
        }
        out
    };
    let (mine, theirs) = (all(&d), all(&o));
    assert_eq!(mine.len(), 17 * 3);
    assert!(mine.iter().zip(&theirs).all(|(a, b)| a != b), "{d} {o}");
    let sdpa = names.iter().position(|n| n == "0/sdpa").unwrap();
    let mut altered: Value = serde_json::from_str(t2.trim()).unwrap();
    altered["probe"]["decoder"]["digests"]["prefill_taps"][sdpa] = json!("0000000000000000");
    let out = render(f, "pair.jsonl", &format!("{t1}{altered}\n{control}\n"), 1);
    assert!(
        out.contains("(every op's digests and tokens): run 2")
            && out.contains("first at the prompt's forward, layer 0's sdpa"),
        "{out}"
    );
    sdpa
}

/// repeat=2: the prompt's forward and decode step 1 run twice more in the process, each the same
/// as the first here (the CPU); the control (repeat=1, a bit flipped) catches both of its
/// repeats; an altered repeat digest (of the tap `tap`) is a finding named at its tap.
fn repeats_are_compared(f: &Fixture, script: &Script, control: &str, tap: usize) {
    let again = probe_lines(
        f,
        script,
        "again.jsonl",
        &format!("{DECODER_ONLY};repeat=2"),
    );
    let d = line_digests(&again);
    let twice = |v: &Value| json!([v, v]);
    assert_eq!(d["prefill_repeats"], twice(&d["prefill_taps"]));
    assert_eq!(d["decode_repeats"], twice(&d["decode_taps"][0]));
    let out = render(f, "rerun.jsonl", &format!("{again}{control}\n"), 0);
    assert!(
        out.contains("rerun.jsonl:1), 2 repeats: identical")
            && out.contains(", 2 of 2 repeated forwards"),
        "{out}"
    );
    let mut altered: Value = serde_json::from_str(again.trim()).unwrap();
    altered["probe"]["decoder"]["digests"]["prefill_repeats"][1][tap] = json!("0");
    let out = render(f, "rerun.jsonl", &format!("{altered}\n{control}\n"), 1);
    assert!(
        out.contains(
            "the prompt's forward run again in the same process (repeat 2 of 2) differs from its first at layer 0's sdpa"
        ),
        "{out}"
    );
}

/// A checkpoint folder the probe cannot read is refused before anything is built: exit 2,
/// the file named, as JSON under --json.
#[test]
fn a_checkpoint_without_a_usable_config_is_refused_before_building() {
    let f = fixture();
    let dir = f.root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"model_type": "gemma3"}"#).unwrap();
    let out = f
        .xtask(&["--json", "exactness", "--checkpoint", dir.to_str().unwrap()])
        .code(2);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("model/config.json") && msg.contains("gemma3"),
        "{msg}"
    );
    assert_eq!(v["kind"], "input");
    assert!(!out.stderr.contains("build-mlx"), "{}", out.stderr);
}
