//! The Nsight Compute side of the GPU scripts, run without a GPU: `cuda/harness/ncu_stalls.py` on
//! small raw and source pages shaped like ncu 2025.3's, `cuda/machine/gpu-session.sh`'s
//! `profile` phase with PROFILE_SOURCE against a stand-in `ncu` that records how it is called, and
//! its `wgmma` phase against a stand-in prototype.

use std::path::Path;
use std::process::Command;

use crate::fixture::{Fixture, Out, workspace};

fn stalls(f: &Fixture, args: &[&str]) -> Out {
    f.out(
        Command::new("python3")
            .arg(workspace().join("cuda/harness/ncu_stalls.py"))
            .args(args)
            .output()
            .unwrap(),
    )
}

fn json_lines(out: &Out) -> Vec<serde_json::Value> {
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const RAW: &str = concat!(
    "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",",
    "\"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\",",
    "\"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\",",
    "\"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio\"\n",
    "\"\",\"\",\"us\",\"inst\",\"inst\",\"inst\"\n",
    "\"0\",\"k<1>\",\"115.808\",\"1.054\",\"1.357\",\"0\"\n",
    "\"1\",\"k<2>\",\"1,172.256\",\"0.49\",\"1.766\",\"1.434\"\n",
);

/// A launch's table; ncu prints each twice.
fn source_table(name: &str, lines: &[(&str, u32, u32, u32)]) -> String {
    let mut t = format!("\"Kernel Name\",\"{name}\",\n");
    t.push_str("\"Address\",\"Source\",\"Warp Stall Sampling (All Samples)\",");
    t.push_str("\"stall_barrier\",\"stall_long_sb\",\"stall_barrier (Not Issued)\"\n");
    for (i, (sass, all, barrier, long_sb)) in lines.iter().enumerate() {
        t.push_str(&format!(
            "\"0x{i:x}\",\"      {sass}\",\"{all}\",\"{barrier}\",\"{long_sb}\",\"{barrier}\"\n"
        ));
    }
    t
}

/// The raw page: every launch's stall reasons, largest first, zeros left out, the units row and
/// thousands separators read; the source page: one line per launch (its repeated table dropped),
/// samples per opcode (a predicate is not an opcode) and the most sampled lines with their
/// reasons (the "Not Issued" columns are not reasons of their own). Bad input is a message
/// naming what is missing, exit 2, nothing on stdout.
#[test]
fn ncu_stalls_reads_the_raw_and_source_pages() {
    let f = Fixture::new(&[("a", "a\n")]);
    let raw = f.t().join("raw.csv");
    std::fs::write(&raw, RAW).unwrap();
    let out = stalls(&f, &[raw.to_str().unwrap()]).code(0);
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["kernel"], "k<1>");
    assert_eq!(rows[0]["us"], 115.808);
    assert_eq!(
        rows[0]["stalls"],
        serde_json::json!({"long_scoreboard": 1.357, "barrier": 1.054})
    );
    // Largest first, as printed.
    let second = out.stdout.lines().nth(1).unwrap();
    let at = |r: &str| second.find(&format!("\"{r}\"")).unwrap();
    assert!(
        at("long_scoreboard") < at("wait") && at("wait") < at("barrier"),
        "{second}"
    );
    assert_eq!(rows[1]["us"], 1172.256);
    // --with: the named metrics' values beside the stalls.
    let with =
        "gpu__time_duration.sum,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio";
    let rows = json_lines(&stalls(&f, &[raw.to_str().unwrap(), "--with", with]).code(0));
    assert_eq!(
        rows[1]["counters"],
        serde_json::json!({
            "gpu__time_duration.sum": 1172.256,
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 1.434
        })
    );

    let m1 = [
        ("ULDC.64 UR4, c[0x0][0x230]", 60, 60, 0),
        ("@!P6 LDG.E.128 R44, desc[UR20][R94.64]", 10, 0, 0),
        ("PRMT R37, R44, 0x7632, R46", 30, 0, 28),
    ];
    let m16 = [("HMMA.16816.F32.BF16 R56, R40, R52, RZ", 5, 0, 0)];
    let page = [
        source_table("k<1>", &m1),
        source_table("k<1>", &m1),
        source_table("k<2>", &m16),
        source_table("k<2>", &m16),
    ]
    .concat();
    let src = f.t().join("source.csv");
    std::fs::write(&src, page).unwrap();
    let rows = json_lines(&stalls(&f, &["--source", src.to_str().unwrap(), "2"]).code(0));
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["samples"], 100.0);
    assert_eq!(
        rows[0]["by_opcode"],
        serde_json::json!({"ULDC": 0.6, "PRMT": 0.3, "LDG": 0.1})
    );
    let top = rows[0]["top"].as_array().unwrap();
    assert_eq!(top.len(), 2, "{top:?}");
    assert_eq!(top[0]["line"], 0);
    assert_eq!(top[0]["stalls"], serde_json::json!({"barrier": 60.0}));
    assert_eq!(top[1]["sass"], "PRMT R37, R44, 0x7632, R46");
    assert_eq!(top[1]["stalls"], serde_json::json!({"long_sb": 28.0}));
    assert_eq!(rows[1]["launch"], 1);

    let missing = f.t().join("missing.csv");
    let plain = f.t().join("plain.csv");
    std::fs::write(&plain, "\"ID\",\"Kernel Name\"\n\"0\",\"k\"\n").unwrap();
    for (args, says) in [
        (vec![], "usage"),
        (vec![missing.to_str().unwrap()], "missing.csv"),
        (vec![plain.to_str().unwrap()], "WarpStateStats"),
        (
            vec!["--source", raw.to_str().unwrap()],
            "no 'Kernel Name' table",
        ),
        (
            vec!["--source", src.to_str().unwrap(), "many"],
            "TOP must be a count",
        ),
        (
            vec![raw.to_str().unwrap(), "--with", "dram__bytes_read.sum"],
            "no metric dram__bytes_read.sum",
        ),
    ] {
        let out = stalls(&f, &args).code(2);
        assert!(out.stderr.contains(says), "{}", out.snapshot());
        assert!(out.stdout.is_empty(), "{}", out.snapshot());
    }
}

/// `bin` with stand-ins for nvidia-smi and nvcc (the machine's line), first on a PATH.
fn stand_in_path(bin: &Path) -> String {
    std::fs::create_dir_all(bin).unwrap();
    for nvidia in ["nvidia-smi", "nvcc"] {
        std::fs::write(bin.join(nvidia), "#!/bin/sh\necho stand-in\n").unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(bin.join(nvidia))
            .status()
            .unwrap();
    }
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// A checkout whose bundle is the one the state already unpacked, with the harness folder the
/// profile phase reads (its build.sh a stand-in that makes `qmv_profile`).
fn profile_checkout(state: &Path, checkout: &Path) {
    let harness = crate::cuda_scripts::unpacked_checkout(state, checkout);
    for py in ["ncu_summary.py", "ncu_stalls.py"] {
        std::fs::copy(workspace().join("cuda/harness").join(py), harness.join(py)).unwrap();
    }
    std::fs::write(
        harness.join("build.sh"),
        "mkdir -p \"$5\" && printf '#!/bin/sh\\n' > \"$5/qmv_profile\" && chmod +x \"$5/qmv_profile\"\n",
    )
    .unwrap();
}

/// gpu-session.sh's profile phase: without PROFILE_SOURCE one ncu call (the details page), as
/// before (PROFILE_METRICS alone changes nothing); with it a second one into a report with
/// WarpStateStats and SourceCounters for the kernels it names (and PROFILE_METRICS's metrics),
/// then that report's raw page (read by ncu_stalls.py into the call's output) and its SASS source
/// page, gzipped. A stand-in ncu writes the pages of the test above.
#[test]
fn gpu_session_profile_reads_the_stalls_per_sass_line_when_asked() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    let bin = f.t().join("bin");
    let log = f.t().join("ncu.log");
    profile_checkout(&state, &checkout);
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(f.t().join("raw.csv"), RAW).unwrap();
    let src = source_table("k<1>", &[("PRMT R37, R44, 0x7632, R46", 3, 0, 3)]);
    std::fs::write(f.t().join("source.csv"), src).unwrap();
    let stub = format!(
        "#!/bin/sh\necho \"$*\" >> {log}\n\
         prev=\n\
         for a in \"$@\"; do [ \"$prev\" = -o ] && touch \"$a.ncu-rep\"; prev=$a; done\n\
         case \"$*\" in\n\
         *'--page raw'*) cat {t}/raw.csv ;;\n\
         *'--page source'*) cat {t}/source.csv ;;\n\
         *' -o '*) ;;\n\
         *) echo '\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Value\",\"Metric Unit\"' ;;\n\
         esac\n",
        log = log.display(),
        t = f.t().display()
    );
    std::fs::write(bin.join("ncu"), stub).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("ncu"))
        .status()
        .unwrap();
    let path = stand_in_path(&bin);
    let run = |source: Option<&str>, metrics: Option<&str>| {
        std::fs::create_dir_all(&out_dir).unwrap();
        let _ = std::fs::remove_file(&log);
        let mut c = Command::new("bash");
        c.arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("profile")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .env("PATH", &path)
            .env_remove("PROFILE_SOURCE")
            .env_remove("PROFILE_METRICS")
            .env_remove("PROFILE_SHAPE");
        if let Some(s) = source {
            c.env("PROFILE_SOURCE", s);
        }
        if let Some(m) = metrics {
            c.env("PROFILE_METRICS", m);
        }
        let out = f.out(c.output().unwrap()).code(0);
        (std::fs::read_to_string(&log).unwrap_or_default(), out)
    };
    let (calls, out) = run(None, Some("dram__bytes_read.sum"));
    assert_eq!(calls.lines().count(), 1, "{calls}\n{}", out.snapshot());
    assert!(calls.contains("--page details"), "{calls}");

    let (calls, out) = run(Some("qmv_invariant_staged"), None);
    let calls: Vec<_> = calls.lines().collect();
    assert_eq!(calls.len(), 4, "{calls:?}\n{}", out.snapshot());
    assert!(
        calls[1].contains("-k regex:qmv_invariant_staged")
            && calls[1].contains("--section SourceCounters")
            && calls[1].contains("--section WarpStateStats"),
        "{}",
        calls[1]
    );
    assert!(calls[2].contains("--page raw"), "{}", calls[2]);
    assert!(
        calls[3].contains("--page source --print-source sass"),
        "{}",
        calls[3]
    );
    assert!(
        out.stdout.contains("\"long_scoreboard\": 1.357"),
        "{}",
        out.snapshot()
    );
    let gz = std::fs::read(out_dir.join("ncu-source.csv.gz")).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "not gzip");
    assert!(!calls[1].contains("--metrics"), "{}", calls[1]);

    // PROFILE_METRICS: the deep report collects them too.
    let (calls, out) = run(
        Some("qmv_invariant_staged"),
        Some("dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum"),
    );
    let deep = calls.lines().nth(1).unwrap_or_default().to_string();
    assert!(
        deep.contains("--metrics dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum"),
        "{deep}\n{}",
        out.snapshot()
    );
}

/// gpu-session.sh's wgmma phase checks each arm the prototype lists in its own process, and times
/// only the arms that passed (with WG_AB_ROUNDS), not the diagnostic `_poison` ones; an arm that
/// fails is named with its exit code, and when none passes the phase fails (exit 1) without
/// timing. With WG_CHECK_REPEAT each arm is checked that many times, its records tagged with
/// the repeat, and an arm that fails once is not timed; a count that is not 1 or more is
/// refused (exit 2) before any check. A `_nofence` arm is a negative control: never timed, named
/// as caught when it fails, and when it passes every check the phase fails (exit 1), its
/// other arms still timed. A stand-in build.sh makes a
/// stand-in `qmv_wgmma` that records its arguments, fails `check bad` and `check ctl_nofence`
/// and fails `check flaky` from its second call on.
#[test]
fn gpu_session_wgmma_checks_each_arm_alone_and_times_those_that_pass() {
    let f = Fixture::new(&[("a", "a\n")]);
    let state = f.t().join("state");
    let checkout = f.t().join("checkout");
    let out_dir = f.t().join("out");
    let log = f.t().join("wgmma.log");
    let harness = crate::cuda_scripts::unpacked_checkout(&state, &checkout);
    std::fs::copy(
        workspace().join("cuda/harness/summarize.py"),
        harness.join("summarize.py"),
    )
    .unwrap();
    let parity = r#"{"kind":"wg_parity","arms":"ARM","checked":1,"differ":0}"#;
    let bench = r#"{"kind":"bench","dtype":"bfloat16","bits":4,"gs":64,"n":8,"k":256,"m":1,"arm":"good","us":1.0,"bytes":8}"#;
    let stub = format!(
        "#!/bin/sh\necho \"$*\" >> {log}\ncase \"$1 $2\" in\n\
         'arms '*) echo good; echo bad; echo also; echo also_poison ;;\n\
         'check bad') exit 1 ;;\n\
         'check ctl_nofence') exit 1 ;;\n\
         'check flaky') [ -f {flag} ] && exit 1; touch {flag}; echo '{parity}' | sed \"s/ARM/$2/\" ;;\n\
         check*) echo '{parity}' | sed \"s/ARM/$2/\" ;;\n\
         ab*) echo '{bench}' ;;\n\
         esac\n",
        log = log.display(),
        flag = f.t().join("flaky.once").display()
    );
    std::fs::write(f.t().join("stub"), &stub).unwrap();
    std::fs::write(
        harness.join("build.sh"),
        format!(
            "mkdir -p \"$5\" && cp {} \"$5/qmv_wgmma\" && chmod +x \"$5/qmv_wgmma\"\n",
            f.t().join("stub").display()
        ),
    )
    .unwrap();
    let path = stand_in_path(&f.t().join("bin"));
    let run_deadline = |arms: Option<&str>, repeat: Option<&str>, deadline: Option<&str>| {
        std::fs::create_dir_all(&out_dir).unwrap();
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new("bash");
        cmd.arg(workspace().join("cuda/machine/gpu-session.sh"))
            .arg("wgmma")
            .current_dir(&checkout)
            .env("GPU_SESSION_DIR", &state)
            .env("OUT", &out_dir)
            .env("PATH", &path)
            .env("WG_AB_ROUNDS", "3")
            .env_remove("WG_NCU")
            .env_remove("WG_ARMS")
            .env_remove("WG_CHECK_REPEAT");
        if let Some(arms) = arms {
            cmd.env("WG_ARMS", arms);
        }
        if let Some(repeat) = repeat {
            cmd.env("WG_CHECK_REPEAT", repeat);
        }
        match deadline {
            Some(d) => cmd.env("DEADLINE", d),
            None => cmd.env_remove("DEADLINE"),
        };
        let out = cmd.output().unwrap();
        (
            f.out(out),
            std::fs::read_to_string(&log).unwrap_or_default(),
        )
    };
    let run_repeated = |arms: Option<&str>, repeat: Option<&str>| run_deadline(arms, repeat, None);
    let run_with = |arms: Option<&str>| run_repeated(arms, None);
    let run = || run_with(None);
    let (out, calls) = run();
    let out = out.code(0);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        [
            "arms",
            "check good",
            "check bad",
            "check also",
            "check also_poison",
            "ab 3 good also"
        ],
        "{}",
        out.snapshot()
    );
    assert!(
        out.stdout.contains("wgmma check bad rc=1"),
        "{}",
        out.snapshot()
    );
    assert!(
        out.stdout
            .contains("wgmma check passed: good also also_poison"),
        "{}",
        out.snapshot()
    );
    let checked = std::fs::read_to_string(out_dir.join("wgmma-check.jsonl")).unwrap();
    assert_eq!(checked.lines().count(), 3, "{checked}");
    assert!(checked.contains(r#""arms":"also""#), "{checked}");
    let timed = std::fs::read_to_string(out_dir.join("wgmma-ab.jsonl")).unwrap();
    assert!(timed.contains(r#""arm":"good""#), "{timed}");

    // WG_ARMS: only the arms named, in its order, without asking for the list.
    let (out, calls) = run_with(Some("also bad"));
    let out = out.code(0);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        ["check also", "check bad", "ab 3 also"],
        "{}",
        out.snapshot()
    );

    // Less time left than the rounds keep back (DEADLINE 5, 10 kept): they run under a
    // 1-second limit instead of `timeout` refusing a negative one (and running nothing).
    let (out, calls) = run_deadline(Some("good"), None, Some("5"));
    let out = out.code(0);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls, ["check good", "ab 3 good"], "{}", out.snapshot());

    // Only a diagnostic arm passing: checked, nothing timed, and the phase passes.
    let (out, calls) = run_with(Some("also_poison bad"));
    let out = out.code(0);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        ["check also_poison", "check bad"],
        "{}",
        out.snapshot()
    );

    // WG_CHECK_REPEAT: each arm checked twice, each record tagged; the arm that fails its
    // second check is named, counted and not timed.
    let (out, calls) = run_repeated(Some("good flaky"), Some("2"));
    let out = out.code(0);
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(
        calls,
        [
            "check good",
            "check good",
            "check flaky",
            "check flaky",
            "ab 3 good"
        ],
        "{}",
        out.snapshot()
    );
    for line in [
        "wgmma check flaky rc=1",
        "wgmma check flaky: 1 of 2 failed",
        "wgmma check good: 0 of 2 failed",
        "wgmma check passed: good",
    ] {
        assert!(out.stdout.contains(line), "{line}\n{}", out.snapshot());
    }
    let checked = std::fs::read_to_string(out_dir.join("wgmma-check.jsonl")).unwrap();
    let tagged: Vec<&str> = checked.lines().collect();
    assert_eq!(
        tagged,
        [
            r#"{"repeat":1,"kind":"wg_parity","arms":"good","checked":1,"differ":0}"#,
            r#"{"repeat":2,"kind":"wg_parity","arms":"good","checked":1,"differ":0}"#,
            r#"{"repeat":1,"kind":"wg_parity","arms":"flaky","checked":1,"differ":0}"#,
        ],
        "{checked}"
    );

    // Negative controls: a failing one is caught and not timed; alone, nothing is timed and the
    // phase passes; one that passes fails the phase after the others are timed.
    let cases: [(&str, i32, &[&str], &str); 3] = [
        (
            "good ctl_nofence",
            0,
            &["check good", "check ctl_nofence", "ab 3 good"],
            "wgmma controls caught (failed, as they must): ctl_nofence",
        ),
        (
            "ctl_nofence",
            0,
            &["check ctl_nofence"],
            "wgmma check passed: none",
        ),
        (
            "good weak_nofence",
            1,
            &["check good", "check weak_nofence", "ab 3 good"],
            "wgmma controls NOT caught (passed every check): weak_nofence",
        ),
    ];
    for (arms, code, want, line) in cases {
        let (out, calls) = run_with(Some(arms));
        let out = out.code(code);
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            want,
            "{}",
            out.snapshot()
        );
        assert!(out.stdout.contains(line), "{line}\n{}", out.snapshot());
    }
    let (out, _) = run_with(Some("also_poison weak_nofence"));
    out.code(1);

    // A repeat count that is not one: refused before anything is checked (exit 2).
    for bad in ["0", "two", "-1"] {
        let (out, calls) = run_repeated(Some("good"), Some(bad));
        let out = out.code(2);
        assert!(calls.is_empty(), "{bad}: {calls}\n{}", out.snapshot());
        assert!(
            out.stderr.contains(&format!("WG_CHECK_REPEAT={bad}")),
            "{}",
            out.snapshot()
        );
    }

    // Every arm failing: no rounds, and the phase fails.
    std::fs::write(f.t().join("stub"), stub.replace("'check bad')", "check*)")).unwrap();
    let (out, calls) = run();
    let out = out.code(1);
    assert!(!calls.contains("ab "), "{calls}\n{}", out.snapshot());
    assert!(
        out.stdout.contains("wgmma check passed: none"),
        "{}",
        out.snapshot()
    );
}
