//! Messages and next steps (issue 13, item 10): every error names what is wrong once, with its
//! file and line; every printed next step works when pasted; the project is found like git finds
//! a repository.

use std::process::Command;

use crate::fixture::{Fixture, git_env};

fn bin() -> std::ffi::OsString {
    std::env::var_os("XTASK_UNDER_TEST").unwrap_or_else(|| env!("CARGO_BIN_EXE_xtask").into())
}

/// `xtask` run in `cwd` without `--root`.
fn xtask_in(f: &Fixture, cwd: &std::path::Path, args: &[&str]) -> crate::fixture::Out {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(cwd)
        .env("OVERLAY_CACHE_DIR", &f.cache);
    git_env(&mut cmd, f.t());
    f.out(cmd.output().unwrap())
}

fn lines(n: usize, f: impl Fn(usize) -> String) -> String {
    (1..=n).map(f).collect()
}

#[test]
fn the_project_is_found_from_the_current_directory_upward() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let deep = f.root.join("overlays/up");
    let out = xtask_in(&f, &deep, &["status"]).ok();
    assert!(out.stdout.contains("upstream up:"), "{}", out.stdout);
    let elsewhere = f.t().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = xtask_in(&f, &elsewhere, &["status"]).code(2);
    assert!(
        out.stderr.contains("not in a project: no pins.toml in") && out.stderr.contains("--root"),
        "{}",
        out.stderr
    );
}

#[test]
fn not_a_project_is_said_once_without_os_error_codes() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let nothere = f.t().join("nothere");
    let out = xtask_in(&f, f.t(), &["--root", nothere.to_str().unwrap(), "status"]).code(2);
    assert!(out.stderr.contains("not a project"), "{}", out.stderr);
    assert!(!out.stderr.contains("os error"), "{}", out.stderr);
}

#[test]
fn a_missing_upstream_path_and_a_missing_pin_name_their_line() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let pins = f.root.join("pins.toml");
    let good = f.read(&pins);
    std::fs::write(
        &pins,
        good.replace(f.upstream.to_str().unwrap(), "/nonexistent/upstream"),
    )
    .unwrap();
    let out = f.xtask(&["apply"]).code(2);
    assert!(
        out.stderr
            .contains("pins.toml:2: upstream.up.url: /nonexistent/upstream does not exist")
            && !out.stderr.contains("unsupported URL protocol"),
        "{}",
        out.stderr
    );
    std::fs::write(&pins, good.replace(&f.pin, &"1".repeat(40))).unwrap();
    let out = f.xtask(&["apply"]).code(2);
    assert!(
        out.stderr
            .contains("pins.toml:3: upstream.up.rev: commit 1111"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches("class=").count(), 0, "{}", out.stderr);
}

/// A key of an upstream table that neither the engine nor one of the fork's pins.toml extensions
/// claims is refused at its line, by the overlay commands and the tasks alike, and nothing is
/// written; a key this xtask's build settings claim is checked on every load (its error at the
/// line of its table's key), and `status` shows the settings.
#[test]
fn an_unclaimed_pins_key_and_a_bad_build_setting_name_their_line() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let pins = f.root.join("pins.toml");
    let good = f.read(&pins);
    assert_eq!(good.lines().count(), 5, "{good}");
    std::fs::write(&pins, format!("{good}brnach = \"main\"\n")).unwrap();
    let before = f.project_snapshot();
    for args in [&["apply"][..], &["status"], &["build-mlx"]] {
        let out = f.xtask(args).code(2);
        assert!(
            out.stderr.contains(
                "pins.toml:6: upstream.up.brnach: unknown key, expected one of url, rev, overlays, branch, fetchcontent, sources"
            ),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(f.project_snapshot(), before);
    let rev = "2".repeat(40);
    let source = format!("[upstream.up.sources.dep]\nurl = \"ext::sh -c x\"\nrev = \"{rev}\"\n");
    std::fs::write(&pins, format!("{good}{source}")).unwrap();
    for args in [&["status"][..], &["build-mlx"]] {
        let out = f.xtask(args).code(2);
        assert!(
            out.stderr
                .contains("pins.toml:7: upstream.up.sources.dep.url: the ext:: transport"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let url = f.upstream.to_str().unwrap();
    std::fs::write(
        &pins,
        format!("{good}{}", source.replace("ext::sh -c x", url)),
    )
    .unwrap();
    let out = f.xtask(&["--json", "status"]).ok();
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["upstream"]["sources"][0]["name"], "dep", "{json}");
    assert_eq!(
        json["upstream"]["sources"][0]["rev"],
        rev.as_str(),
        "{json}"
    );
    assert_eq!(
        json["upstream"]["fetchcontent"],
        serde_json::json!({}),
        "{json}"
    );
}

#[test]
fn an_unknown_depends_on_names_its_line() {
    let f = Fixture::new(&[("a.c", "int f(int x) {\n  return x;\n}\n")]);
    let name = f.add_overlay(
        "Tweak f",
        &[("a.c", Some("int f(int x) {\n  return x + 1;\n}\n"))],
        "Overlay-Kind: local-only\nDepends-On: a.c::nosuch",
    );
    let patch = f.read(f.root.join("overlays/up").join(&name));
    let line = patch
        .lines()
        .position(|l| l.starts_with("Depends-On: a.c::nosuch"))
        .unwrap()
        + 1;
    let out = f.xtask(&["drift", "--to", &f.pin]).code(2);
    assert!(
        out.stderr
            .contains(&format!("{name}:{line}: Depends-On: a.c::nosuch")),
        "{}",
        out.stderr
    );
}

#[test]
fn into_accepts_the_name_without_patch_its_number_or_its_subject() {
    let f = Fixture::new(&[("a.txt", &lines(20, |i| format!("l{i}\n")))]);
    f.add_overlay(
        "First",
        &[(
            "a.txt",
            Some(&lines(20, |i| {
                if i == 5 {
                    "FIVE\n".into()
                } else {
                    format!("l{i}\n")
                }
            })),
        )],
        "Overlay-Kind: local-only",
    );
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["apply", "--dir", d]).ok();
    for (n, want) in [(15, "0001-First"), (16, "0001"), (17, "First")] {
        let a = f
            .read(dir.join("a.txt"))
            .replace(&format!("l{n}\n"), &format!("L{n}\n"));
        std::fs::write(dir.join("a.txt"), a).unwrap();
        let out = f.xtask(&["refresh", "--dir", d, "--into", want]).ok();
        assert!(
            out.stdout.contains("0001-First.patch"),
            "{want}: {}",
            out.stdout
        );
    }
    let out = f
        .xtask(&["refresh", "--dir", d, "--into", "Second"])
        .code(2);
    assert!(
        out.stderr.contains("no such overlay")
            && out.stderr.contains("the series holds: 0001-First.patch"),
        "{}",
        out.stderr
    );
}

/// A conflicting bump with `--upstream`: every printed next step, pasted, works.
#[test]
fn printed_next_steps_work_when_pasted() {
    let f = Fixture::new(&[("a.txt", &lines(20, |i| format!("l{i}\n")))]);
    f.add_overlay(
        "Ten",
        &[(
            "a.txt",
            Some(&lines(20, |i| {
                if i == 10 {
                    "TEN\n".into()
                } else {
                    format!("l{i}\n")
                }
            })),
        )],
        "Overlay-Kind: local-only",
    );
    let new = f.commit_upstream(
        &[(
            "a.txt",
            &lines(20, |i| {
                if i == 10 {
                    "ten up\n".into()
                } else {
                    format!("l{i}\n")
                }
            }),
        )],
        "conflict",
    );
    let out = f.xtask(&["--upstream", "up", "bump-pin", &new]).code(1);
    let step = |out: &str, verb: &str| -> Vec<String> {
        let l = out
            .lines()
            .find(|l| l.contains(&format!("bump-pin {verb}")))
            .unwrap_or_else(|| panic!("no {verb} step in {out}"));
        let cmd = l[l.find("cargo xtask").unwrap() + "cargo xtask".len()..]
            .trim_end_matches([')', '`'])
            .split('`')
            .next()
            .unwrap();
        cmd.split_whitespace().map(String::from).collect()
    };
    let cont = step(&out.stdout, "--continue");
    assert!(cont.contains(&"--upstream".to_string()), "{cont:?}");
    // A second bump-pin names the same steps; --abort with another REV is refused, not ignored.
    let again = f.xtask(&["--upstream", "up", "bump-pin", &new]).code(2);
    assert_eq!(step(&again.stderr, "--continue"), cont, "{}", again.stderr);
    let other = f.commit_upstream(&[("b.txt", "b\n")], "later");
    let out2 = f.xtask(&["bump-pin", &other, "--abort"]).code(2);
    assert!(
        out2.stderr.contains("nothing was removed"),
        "{}",
        out2.stderr
    );
    assert!(f.root.join("target/bump/up").exists());
    // Resolve, then run exactly the printed --continue (it carries --root too).
    let tree = f.root.join("target/bump/up/a.txt");
    std::fs::write(
        &tree,
        lines(20, |i| {
            if i == 10 {
                "TEN up\n".into()
            } else {
                format!("l{i}\n")
            }
        }),
    )
    .unwrap();
    // (Reports are scrubbed of the temporary folder: put it back.)
    let t = f.t().to_str().unwrap();
    let args: Vec<String> = cont.iter().map(|a| a.replace("$TMP", t)).collect();
    let mut cmd = Command::new(bin());
    cmd.args(&args).env("OVERLAY_CACHE_DIR", &f.cache);
    git_env(&mut cmd, f.t());
    let done = f.out(cmd.output().unwrap()).ok();
    assert!(done.stdout.contains("pinned up at"), "{}", done.stdout);
}

/// The engine's suggestions (here: apply refusing a tree with edits) carry the run's --root and
/// --upstream too.
#[test]
fn suggested_commands_in_errors_carry_root_and_upstream() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["--upstream", "up", "apply", "--dir", d]).ok();
    std::fs::write(dir.join("a.txt"), "edited\n").unwrap();
    let out = f.xtask(&["--upstream", "up", "apply", "--dir", d]).code(2);
    assert!(
        out.stderr
            .contains("`cargo xtask --root $TMP/project --upstream up refresh --dir"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("--root $TMP/project --root"),
        "{}",
        out.stderr
    );
}

/// `--abort` needs no REV (it used to be required, and then ignored).
#[test]
fn abort_needs_no_rev() {
    let f = Fixture::new(&[("a.txt", &lines(20, |i| format!("l{i}\n")))]);
    let ten = |t: &'static str| {
        move |i: usize| {
            if i == 10 {
                t.to_string()
            } else {
                format!("l{i}\n")
            }
        }
    };
    f.add_overlay(
        "Ten",
        &[("a.txt", Some(&lines(20, ten("TEN\n"))))],
        "Overlay-Kind: local-only",
    );
    f.commit_upstream(&[("a.txt", &lines(20, ten("ten up\n")))], "conflict");
    f.xtask(&["bump-pin", "main"]).code(1);
    let out = f.xtask(&["bump-pin", "--abort"]).ok();
    assert!(out.stdout.contains("bump abandoned"), "{}", out.stdout);
    assert!(!f.root.join("target/bump/up").exists());
}

/// repro turn3/M: a misspelt trailer key (`Depend-On:`) was ignored, and with it the dependency
/// drift watches. Every command that reads the series refuses it, at its line, naming the key
/// meant; nothing is written.
#[test]
fn a_misspelt_trailer_key_is_refused_with_the_key_meant() {
    let f = Fixture::new(&[("src/lib.c", "int helper(void) {\n  return 1;\n}\n")]);
    f.add_overlay(
        "Tune",
        &[("src/lib.c", Some("int helper(void) {\n  return 2;\n}\n"))],
        "Overlay-Kind: upstreamable\nDepend-On: src/lib.c::helper\nSigned-off-by: Ada <ada@example.com>",
    );
    f.commit_upstream(&[("README", "r\n")], "more");
    let before = f.project_snapshot();
    let out = f.xtask(&["check"]);
    expect_test::expect![[r#"
        exit 2
        --- stdout
        --- stderr
        error: $TMP/project/overlays/up/0001-Tune.patch:9: unknown trailer "Depend-On" in the trailer paragraph
          help: did you mean `Depends-On:`? fix the spelling; the trailer paragraph (the message's last) takes the fork's trailers (Overlay-Kind, Upstream-Status, Depends-On, Base, Reverts-Upstream, Reverts-Overlay) and the usual git ones (Signed-off-by, Reviewed-by, Fixes, ...); a note of your own belongs in the message above it, separated by a blank line
    "#]]
    .assert_eq(&out.snapshot());
    for args in [&["drift"][..], &["bump-pin", "main"], &["apply"]] {
        let out = f.xtask(args).code(2);
        assert!(
            out.stderr.contains("did you mean `Depends-On:`?"),
            "{args:?}: {}",
            out.stderr
        );
    }
    assert_eq!(before, f.project_snapshot(), "nothing written");
    assert!(!f.root.join("target/apply/up").exists());
    // Spelt right, the same overlay is fine.
    let p = f.root.join("overlays/up/0001-Tune.patch");
    std::fs::write(&p, f.read(&p).replace("Depend-On:", "Depends-On:")).unwrap();
    f.xtask(&["check"]).ok();
}

/// Help names the command as it is typed (`cargo xtask`, not the `xtask` file the alias runs),
/// says where `--root` looks by default, and lists the options every command takes under a heading
/// of their own (issue 29, part 3).
#[test]
fn help_names_cargo_xtask_and_lists_the_global_options_apart() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let out = xtask_in(&f, f.t(), &["drift", "--help"]).ok();
    expect_test::expect![[r#"
        Classify every overlay against another upstream commit (clean, moved, context-drift, upstreamed, conflict)

        Usage: cargo xtask drift [OPTIONS]

        Options:
              --to <REV>        Target commit-ish [default: the head of the upstream branch named in pins.toml]
              --from <REV>      Starting commit-ish [default: the pin]
              --per-commit      Walk first-parent commits and blame the commit where each overlay reached its status
              --summary <FILE>  Also write a Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)
          -h, --help            Print help

        Global options:
              --root <DIR>       Folder holding pins.toml and the overlays [default: the nearest folder holding pins.toml, from the current directory upward]
              --upstream <NAME>  Which upstream of pins.toml [default: pins.toml's `default`, or its only upstream]
              --json             Machine-readable output on stdout
    "#]]
    .assert_eq(&out.stdout);
    let out = xtask_in(&f, f.t(), &["--help"]).ok();
    assert!(
        out.stdout
            .contains("Usage: cargo xtask [OPTIONS] <COMMAND>"),
        "{}",
        out.stdout
    );
    let out = xtask_in(&f, f.t(), &["frobnicate"]).code(2);
    assert!(
        out.stderr
            .contains("Usage: cargo xtask [OPTIONS] <COMMAND>"),
        "{}",
        out.stderr
    );
}

/// Under `--json`, wherever it stands, a usage error clap finds (an unknown command, a missing
/// value) is the one JSON error shape on stdout, exit 2, clap's text on stderr; without `--json`
/// stdout stays empty; `--help` and `--version` still print and exit 0 (issue 29, part 3).
#[test]
fn usage_errors_under_json_are_the_one_error_shape() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let cases: &[(&[&str], &str)] = &[
        (
            &["--json", "frobnicate"],
            "unrecognized subcommand 'frobnicate'",
        ),
        (
            &["--json", "drift", "--to"],
            "a value is required for '--to <REV>'",
        ),
        (
            &["drift", "--json", "--to"],
            "a value is required for '--to <REV>'",
        ),
    ];
    for (args, what) in cases {
        let out = f.xtask(args).code(2);
        assert!(
            out.stdout.starts_with("{\"schema\":1,"),
            "{args:?}: {}",
            out.stdout
        );
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", out.stdout));
        assert_eq!(v["kind"], "input", "{args:?}: {v}");
        let error = v["error"].as_str().unwrap();
        assert!(error.starts_with(what), "{args:?}: {v}");
        assert!(
            v["hint"].as_str().unwrap().contains("'--help'"),
            "{args:?}: {v}"
        );
        assert!(
            out.stderr.starts_with(&format!("error: {what}")),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = f.xtask(&["--json", "frobnicate"]).code(2);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("\n\nUsage: cargo xtask [OPTIONS] <COMMAND>\n"),
        "{v}"
    );
    let out = f.xtask(&["frobnicate"]).code(2);
    assert_eq!(out.stdout, "", "no JSON without --json");
    let out = f.xtask(&["--json", "--help"]).ok();
    assert!(out.stdout.contains("Usage: cargo xtask"), "{}", out.stdout);
    let out = f.xtask(&["drift", "--help", "--json"]).ok();
    assert!(
        out.stdout.contains("Usage: cargo xtask drift"),
        "{}",
        out.stdout
    );
    let out = f.xtask(&["--json", "--version"]).ok();
    assert!(out.stdout.starts_with("cargo xtask "), "{}", out.stdout);
}

/// `--to origin/main` (a name of the user's own clone) is refused naming the upstream as pins.toml
/// does, not the local mirror git reaches it through, and says branch names are upstream's own
/// (issue 29, part 3).
#[test]
fn an_unknown_branch_names_the_pinned_url_and_upstreams_own_names() {
    let f = Fixture::new(&[("a.txt", "a\n")]);
    let url = "https://example.com/up.git";
    let rule = format!("[url \"{}\"]\n\tinsteadOf = {url}\n", f.upstream.display());
    std::fs::write(f.t().join(".gitconfig"), &rule).unwrap();
    let config = f.read(f.t().join("gitconfig"));
    std::fs::write(f.t().join("gitconfig"), format!("{config}{rule}")).unwrap();
    let pins = f.root.join("pins.toml");
    let text = f.read(&pins);
    std::fs::write(&pins, text.replace(f.upstream.to_str().unwrap(), url)).unwrap();
    f.xtask(&["status"]).ok();
    let out = f.xtask(&["drift", "--to", "origin/main"]).code(2);
    assert!(
        out.stderr.starts_with(&format!(
            "error: {url}: \"origin/main\": no such commit, branch or tag\n"
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "help: branch and tag names are the upstream's own, as {url} names them (such as `main`, not `origin/main`)"
        )),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("$TMP"), "{}", out.stderr);
}
