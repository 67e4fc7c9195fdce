//! A downstream fork's xtask drives the commands through the library: on its own `pins.toml`
//! (a synthetic upstream made here with real git) it records an overlay, sees it drift, and
//! bumps the pin, carrying the overlay.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Fork {
    tmp: tempfile::TempDir,
    upstream: PathBuf,
    root: PathBuf,
}

impl Fork {
    fn new() -> Fork {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::write(t.join("gitconfig"), "[init]\n\tdefaultBranch = main\n").unwrap();
        let fork = Fork {
            upstream: t.join("upstream"),
            root: t.join("fork"),
            tmp,
        };
        std::fs::create_dir_all(&fork.upstream).unwrap();
        std::fs::create_dir_all(fork.root.join("overlays/up")).unwrap();
        std::fs::write(fork.root.join("overlays/up/series"), "").unwrap();
        fork.git(&["init", "-q"]);
        fork
    }

    fn env(&self, cmd: &mut Command) {
        let t = self.tmp.path();
        cmd.env("HOME", t)
            .env("GIT_CONFIG_GLOBAL", t.join("gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Ada Fork")
            .env("GIT_AUTHOR_EMAIL", "ada@example.com")
            .env("GIT_COMMITTER_NAME", "Ada Fork")
            .env("GIT_COMMITTER_EMAIL", "ada@example.com")
            .env("GIT_AUTHOR_DATE", "@1767225600 +0000")
            .env("GIT_COMMITTER_DATE", "@1767225600 +0000")
            .env("OVERLAY_CACHE_DIR", t.join("cache"))
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
    }

    fn git(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.args(args).current_dir(&self.upstream);
        self.env(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn commit(&self, path: &str, text: &str, msg: &str) -> String {
        std::fs::write(self.upstream.join(path), text).unwrap();
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
        self.git(&["rev-parse", "HEAD"])
    }

    fn pin(&self, rev: &str) {
        let pins = format!(
            "[upstream.up]\nurl = \"{}\"\nrev = \"{rev}\"\noverlays = \"overlays/up\"\nbranch = \"main\"\n",
            self.upstream.display()
        );
        std::fs::write(self.root.join("pins.toml"), pins).unwrap();
    }

    /// The fork's xtask, run from inside the fork (it finds pins.toml upward, no --root).
    fn xtask(&self, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_downstream-xtask"));
        cmd.args(args).current_dir(&self.root);
        self.env(&mut cmd);
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.xtask(args);
        assert_eq!(code, 0, "{args:?}\nstdout:\n{out}\nstderr:\n{err}");
        out
    }

    fn read(&self, p: impl AsRef<Path>) -> String {
        std::fs::read_to_string(self.root.join(p)).unwrap()
    }
}

#[test]
fn a_downstream_xtask_records_drifts_and_bumps_its_own_pins() {
    let f = Fork::new();
    let base = "int a;\nint b;\nint c;\nint d;\nint e;\nint f;\nint g;\nint h;\n";
    let pin = f.commit("lib.c", base, "initial");
    f.pin(&pin);

    // The fork's own task sits next to the overlay commands.
    assert_eq!(f.ok(&["pin"]).trim(), pin);

    // An overlay, made the way a maintainer makes one: apply, edit, new-overlay.
    f.ok(&["apply"]);
    let tree = f.root.join("target/apply/up/lib.c");
    std::fs::write(&tree, base.replace("int f;", "long f;")).unwrap();
    f.ok(&[
        "new-overlay",
        "0001-wider-b.patch",
        "--kind",
        "local-only",
        "-m",
        "Make f wider",
        "-m",
        "Why: the fork needs it.",
    ]);
    assert_eq!(f.read("overlays/up/series").trim(), "0001-wider-b.patch");
    f.ok(&["check"]);

    // Upstream moves on: lines land above the overlay's hunk.
    let next = f.commit(
        "lib.c",
        &format!("int z0;\nint z1;\n{base}"),
        "two lines on top",
    );

    let (code, out, err) = f.xtask(&["drift", "--to", &next, "--json"]);
    assert!(code == 0 || code == 1, "drift: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(report["schema"], 1, "{report}");
    assert_eq!(report["overlays"][0]["status"], "moved", "{report}");

    // bump-pin: a dry run changes nothing, the real one moves the pin and carries the overlay.
    let before = f.read("pins.toml");
    let old_patch = f.read("overlays/up/0001-wider-b.patch");
    f.ok(&["bump-pin", &next, "--dry-run"]);
    assert_eq!(f.read("pins.toml"), before);
    f.ok(&["bump-pin", &next]);
    assert!(
        f.read("pins.toml").contains(&next),
        "{}",
        f.read("pins.toml")
    );
    let patch = f.read("overlays/up/0001-wider-b.patch");
    // Rewritten at its new lines (the tree below proves it still makes the same edit).
    assert_ne!(patch, old_patch);
    f.ok(&["check"]);
    f.ok(&["apply"]);
    assert_eq!(
        std::fs::read_to_string(&tree).unwrap(),
        format!("int z0;\nint z1;\n{}", base.replace("int f;", "long f;"))
    );

    // Errors come in the one JSON shape and exit 2.
    let (code, out, _) = f.xtask(&["bump-pin", "no-such-rev", "--json"]);
    assert_eq!(code, 2);
    let err: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(err["schema"], 1);
    assert!(
        err["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-rev")),
        "{err}"
    );
}

/// The flattened CLI as README shows it, its output piped into a reader that is already gone
/// (`xtask status | head -0`): the process ends quietly, not with a panic (exit 101), for the
/// overlay commands and for the fork's own task alike (`overlay_cli::parse` restores SIGPIPE's
/// default; issue 24, repro P; issue 29, part 3: `pin` panicked).
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let f = Fork::new();
    let pin = f.commit("f.txt", &"line\n".repeat(400), "init");
    f.pin(&pin);
    for args in [&["apply", "--json"][..], &["pin"], &["status"]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_downstream-xtask"));
        cmd.args(args)
            .current_dir(&f.root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        f.env(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A fork that registers no pins.toml extension owns only the engine's keys: another key (this
/// repository's build `sources`, say) is an error at its line, naming the keys there are, in the
/// overlay commands and the fork's own task alike.
#[test]
fn a_key_no_extension_claims_is_refused_at_its_line() {
    let f = Fork::new();
    let pin = f.commit("f.txt", "line\n", "init");
    f.pin(&pin);
    let pins = f.root.join("pins.toml");
    let text = std::fs::read_to_string(&pins).unwrap();
    std::fs::write(
        &pins,
        format!("{text}[upstream.up.sources.dep]\nurl = \"/srv/dep\"\n"),
    )
    .unwrap();
    for args in [&["status"][..], &["pin"]] {
        let (code, _, err) = f.xtask(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("pins.toml:6: upstream.up.sources: unknown key, expected one of url, rev, overlays, branch\n"),
            "{args:?}: {err}"
        );
    }
}

/// The fork's CLI names itself as it set its name (`cargo xtask`), and its usage errors under
/// `--json` are the one JSON error shape, as the library's own commands' errors are.
#[test]
fn the_forks_name_is_in_its_help_and_usage_errors_are_json() {
    let f = Fork::new();
    let (code, out, _) = f.xtask(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage: cargo xtask [OPTIONS] <COMMAND>"),
        "{out}"
    );
    assert!(out.contains("Global options:"), "{out}");
    let (code, out, err) = f.xtask(&["pin", "--json", "extra"]);
    assert_eq!(code, 2, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(
        (v["schema"].as_u64(), v["kind"].as_str()),
        (Some(1), Some("input")),
        "{v}"
    );
}

/// README's "Use it in your fork", followed literally, is this example: the flattened main is
/// this crate's main.rs, and the alias it gives is the one this repository's
/// `.cargo/config.toml` uses.
#[test]
fn readme_shows_this_example_as_it_is() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(here.join("../../README.md")).unwrap();
    let section = &readme[readme.find("## Use it in your fork").unwrap()..];
    let section = &section[..section[3..].find("\n## ").unwrap()];
    let main = std::fs::read_to_string(here.join("src/main.rs")).unwrap();
    let body = &main[main.find("use std::process::ExitCode;").unwrap()..];
    assert!(
        section.contains(&format!("```rust\n{body}```\n")),
        "README's flattened main differs from examples/downstream-xtask/src/main.rs"
    );
    let config = std::fs::read_to_string(here.join("../../.cargo/config.toml")).unwrap();
    assert!(
        section.contains(&format!("```toml\n# .cargo/config.toml\n{config}```\n")),
        "README's alias differs from .cargo/config.toml:\n{config}"
    );
}
