//! `import` on synthetic histories: copies made at later and earlier bases, a copy that deletes an
//! upstream addition, a file upstream lacks, idempotence, bad input; and the same "reverts upstream
//! work" check in `check` and `drift`. git is the reference: `git am` of the series at the pin
//! gives the copies back.

use std::path::{Path, PathBuf};

use crate::fixture::Fixture;

/// `n` numbered lines `<tag> <i>`.
fn lines(tag: &str, n: usize) -> String {
    (1..=n).map(|i| format!("{tag} {i}\n")).collect()
}

/// An upstream with a history around the pin, first parents only:
///   c0  src/a.c, src/b.c, src/c.c
///   c1  a.c gains a block `added_by_c1` in the middle (the "upstream addition")
///   c2  b.c loses two lines
///   c3  the PIN: a.c's last line changes
///   c4  a.c gains `later_c4` lines at its end (after the pin)
///   c5  c.c changes (head of main)
struct History {
    f: Fixture,
    c: Vec<String>,
}

fn a_c0() -> String {
    lines("a", 20)
}
fn a_c1() -> String {
    let mut s = lines("a", 10);
    s.push_str("added_by_c1 one\nadded_by_c1 two\nadded_by_c1 three\n");
    s.push_str(&(11..=20).map(|i| format!("a {i}\n")).collect::<String>());
    s
}
fn a_c3() -> String {
    a_c1().replace("a 20\n", "a 20 (pin)\n")
}
fn a_c4() -> String {
    format!("{}later_c4 x\nlater_c4 y\n", a_c3())
}
fn b_c0() -> String {
    lines("b", 20)
}
fn b_c2() -> String {
    b_c0().replace("b 5\n", "").replace("b 6\n", "")
}

fn history() -> History {
    let f = Fixture::new(&[
        ("src/a.c", &a_c0()),
        ("src/b.c", &b_c0()),
        ("src/c.c", &lines("c", 5)),
    ]);
    let mut c = vec![f.pin.clone()];
    c.push(f.commit_upstream(&[("src/a.c", &a_c1())], "a: add the c1 block"));
    c.push(f.commit_upstream(&[("src/b.c", &b_c2())], "b: drop two lines"));
    c.push(f.commit_upstream(&[("src/a.c", &a_c3())], "a: change the last line"));
    c.push(f.commit_upstream(&[("src/a.c", &a_c4())], "a: add later lines"));
    c.push(f.commit_upstream(&[("src/c.c", &lines("cc", 5))], "c: rewrite"));
    let mut f = f;
    f.pin = c[3].clone();
    f.write_pins(&f.pin);
    History { f, c }
}

fn write_copies(dir: &Path, files: &[(&str, &str)]) {
    for (p, text) in files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

impl History {
    /// An overlay at the pin changing a.c's first line (`a 1 (overlay)`); its file name.
    fn first_line_overlay(&self) -> String {
        self.f.git(&self.f.work, &["fetch", "-q", "origin"]);
        self.f.git(&self.f.work, &["checkout", "-q", &self.f.pin]);
        self.f.add_overlay(
            "fork: first line",
            &[("src/a.c", Some(&a_c3().replace("a 1\n", "a 1 (overlay)\n")))],
            "Overlay-Kind: local-only",
        )
    }

    fn copies(&self, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.f.t().join(format!("copies{}", files.len()));
        write_copies(&dir, files);
        dir
    }

    fn import(&self, dir: &Path, extra: &[&str]) -> crate::fixture::Out {
        let mut args = vec!["import", dir.to_str().unwrap()];
        args.extend(extra);
        self.f.xtask(&args)
    }

    fn json(&self, dir: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
        let mut args = vec!["--json"];
        args.extend(extra);
        let out = self.import(dir, &args);
        let v = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
        (out.code, v)
    }

    /// `git am` of the series at the pin must give each copy byte for byte.
    #[track_caller]
    fn assert_git_am_gives(&self, files: &[(&str, &str)]) {
        let tree = self.f.git_am_tree();
        for (p, text) in files {
            assert_eq!(
                std::fs::read_to_string(tree.join(p)).unwrap(),
                *text,
                "{p}: git am of the imported series differs from the copy"
            );
        }
    }
}

fn file<'a>(v: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {v:#}"))
}

/// A copy made after the pin (a.c at c4, edited): its base is c4, one commit after the pin; the
/// overlay brings the later lines along, reverts nothing, and `git am` at the pin gives the copy.
#[test]
fn copy_made_at_a_later_base() {
    let h = history();
    let copy = a_c4().replace("a 3\n", "a 3 (fork)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let (code, v) = h.json(&dir, &[]);
    assert_eq!(code, 0, "{v:#}");
    let a = file(&v, "src/a.c");
    assert_eq!(a["base"]["commit"], h.c[4]);
    assert_eq!(a["base"]["distance"], 1);
    assert_eq!(a["diff_at_base"], 2);
    assert_eq!(a["diff_at_pin"], 4);
    assert_eq!(a["reverts"].as_array().unwrap().len(), 0);
    assert_eq!(v["searched_before"], 3);
    assert_eq!(v["searched_after"], 2);
    assert_eq!(v["written"], true);
    h.assert_git_am_gives(&[("src/a.c", &copy)]);
    let ov = &v["overlays"][0]["name"];
    assert_eq!(ov, "0001-import-a-c.patch");
    let text = h.f.read(h.f.root.join("overlays/up/0001-import-a-c.patch"));
    assert!(text.contains(&format!("\nBase: {}\n", h.c[4])), "{text}");
    h.f.xtask(&["check"]).ok();
}

/// A copy made before the pin that upstream only shortened since (b.c at c0, edited): base c1
/// (the closest commit with that version), two commits before the pin; the lines upstream dropped
/// come back (the copy has them): refused until accepted, then `git am` gives the copy.
#[test]
fn copy_made_at_an_earlier_base() {
    let h = history();
    let copy = b_c0().replace("b 17\n", "b 17 (fork)\n");
    let dir = h.copies(&[("src/b.c", &copy)]);
    // The copy brings back the two lines c2 deleted: named, nothing written (issue 24, F).
    let refused = h.import(&dir, &[]).code(1);
    assert!(
        refused
            .stdout
            .contains("REVERTS src/b.c: brings back 2 line(s)"),
        "{}",
        refused.stdout
    );
    let out = h.import(&dir, &["--accept-reverts"]).ok();
    let (_, v) = h.json(&dir, &["--dry-run"]);
    // The second (dry) run finds nothing left to do.
    assert_eq!(v["overlays"].as_array().unwrap().len(), 0, "{v:#}");
    assert!(
        out.stdout.contains("2 commit(s) before the pin"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  changed   src/b.c"), "{}", out.stdout);
    h.assert_git_am_gives(&[("src/b.c", &copy)]);
    let (_, v) = {
        // The report of a fresh import of the same copy into an empty series, for the numbers.
        let h2 = history();
        let dir = h2.copies(&[("src/b.c", &copy)]);
        h2.json(&dir, &["--dry-run"])
    };
    let b = file(&v, "src/b.c");
    // c1 is the closest commit with c0's b.c (a.c changed there, b.c did not).
    assert_eq!(b["base"]["commit"], h.c[1]);
    assert_eq!(b["base"]["distance"], -2);
    assert_eq!(b["diff_at_base"], 2);
    assert_eq!(b["diff_at_pin"], 4);
    assert_eq!(b["added"], 3);
    assert_eq!(b["removed"], 1);
}

/// A copy made at c0 deletes c1's block: the finding names c1 and the lines; without
/// --accept-reverts nothing is written (exit 1); with it the overlay records the confirmation,
/// `git am` gives the copy, and check is quiet. A hand edit dropping the confirmation makes check
/// report REVERTS, and drift lists it in its JSON.
#[test]
fn copy_deleting_an_upstream_addition_is_refused_until_accepted() {
    let h = history();
    let copy = a_c0().replace("a 2\n", "a 2 (fork)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let before = h.f.project_snapshot();
    let out = h.import(&dir, &[]).code(1);
    assert_eq!(h.f.project_snapshot(), before, "a refusal wrote something");
    let c1 = &h.c[1][..12];
    assert!(
        out.stdout.contains(&format!(
            "REVERTS src/a.c: deletes 3 upstream line(s) (lines 11-13 at the pin) that {c1} \"a: add the c1 block\" added after the base"
        )),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  - added_by_c1 one"), "{}", out.stdout);
    assert!(out.stdout.contains("nothing was written"), "{}", out.stdout);
    let (code, v) = h.json(&dir, &[]);
    assert_eq!(code, 1);
    let a = file(&v, "src/a.c");
    assert_eq!(a["base"]["commit"], h.c[0]);
    assert_eq!(a["base"]["distance"], -3);
    let r = &a["reverts"][0];
    assert_eq!(r["commit"], h.c[1]);
    assert_eq!(
        (r["first_line"].clone(), r["last_line"].clone()),
        (11.into(), 13.into())
    );
    // git blame agrees on who added those lines.
    let range = format!("{}..{}", h.c[0], h.f.pin);
    let blame = h.f.git(
        &h.f.upstream,
        &[
            "blame",
            "-l",
            "-s",
            "--first-parent",
            "-L",
            "11,13",
            &range,
            "--",
            "src/a.c",
        ],
    );
    for l in blame.lines() {
        assert!(l.starts_with(&h.c[1]), "git blame: {blame}");
    }
    // The pin's own change to the last line is a deletion too, added by the pin commit itself.
    assert_eq!(a["reverts"].as_array().unwrap().len(), 2, "{a:#}");
    assert_eq!(a["reverts"][1]["commit"], "$PIN"); // the test scrubs the pin's id
    assert_eq!(h.f.project_snapshot(), before);

    h.import(&dir, &["--accept-reverts"]).ok();
    h.assert_git_am_gives(&[("src/a.c", &copy)]);
    let name = "overlays/up/0001-import-a-c.patch";
    let text = h.f.read(h.f.root.join(name));
    assert!(
        text.contains(&format!("Reverts-Upstream: {}\n", h.c[1])),
        "{text}"
    );
    h.f.xtask(&["check"]).ok();
    let v: serde_json::Value =
        serde_json::from_str(&h.f.xtask(&["drift", "--json"]).stdout).unwrap();
    assert_eq!(v["overlays"][0]["reverts"][0]["accepted"], true, "{v:#}");

    // A hand edit drops the confirmation for c1: check and drift see it again.
    let edited = text.replace(&format!("Reverts-Upstream: {}\n", h.c[1]), "");
    std::fs::write(h.f.root.join(name), edited).unwrap();
    let out = h.f.xtask(&["check"]).code(1);
    assert!(
        out.stdout
            .contains("REVERTS  0001-import-a-c.patch: src/a.c hunk #2"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("that {c1} \"a: add the c1 block\"")),
        "{}",
        out.stdout
    );
    let out = h.f.xtask(&["drift", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let reverts = v["overlays"][0]["reverts"].as_array().unwrap();
    assert!(
        reverts
            .iter()
            .any(|r| r["commit"] == h.c[1] && r["accepted"] == false),
        "{v:#}"
    );
}

/// An overlay without a Base: trailer is based on the pin: check and drift stay quiet, and drift's
/// JSON still carries an (empty) `reverts` list for it.
#[test]
fn overlays_without_a_base_revert_nothing() {
    let h = history();
    h.f.git(&h.f.work, &["fetch", "-q", "origin"]);
    h.f.git(&h.f.work, &["checkout", "-q", &h.f.pin]);
    h.f.add_overlay(
        "drop the c1 block",
        &[("src/a.c", Some(&a_c3().replace("added_by_c1 two\n", "")))],
        "Overlay-Kind: local-only",
    );
    h.f.xtask(&["check"]).ok();
    let out = h.f.xtask(&["drift", "--to", &h.f.pin, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["overlays"][0]["reverts"], serde_json::json!([]), "{v:#}");
}

/// A file upstream lacks (in an upstream folder) becomes a new-file overlay; with --one-per-file
/// each file gets its own overlay; importing again writes nothing and says so.
#[test]
fn new_files_one_per_file_and_idempotence() {
    let h = history();
    let copy_b = b_c2().replace("b 1\n", "b 1 (fork)\n");
    let new = "int fresh(void) { return 1; }\n";
    let dir = h.copies(&[("src/b.c", &copy_b), ("src/new.c", new)]);
    let (code, v) = h.json(&dir, &["--one-per-file"]);
    assert_eq!(code, 0, "{v:#}");
    let n = file(&v, "src/new.c");
    assert_eq!(n["status"], "new-file");
    assert_eq!(n["base"], serde_json::Value::Null);
    assert_eq!(n["diff_at_pin"], 1);
    assert_eq!(file(&v, "src/b.c")["base"]["distance"], 0);
    let names: Vec<&str> = v["overlays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["0001-import-b-c.patch", "0002-import-new-c.patch"]);
    assert_eq!(
        h.f.read(h.f.root.join("overlays/up/series")),
        "0001-import-b-c.patch\n0002-import-new-c.patch\n"
    );
    h.assert_git_am_gives(&[("src/b.c", &copy_b), ("src/new.c", new)]);
    h.f.xtask(&["check"]).ok();

    let before = h.f.project_snapshot();
    let out = h.import(&dir, &["--one-per-file"]).ok();
    assert!(
        out.stdout
            .contains("nothing to import: every copy already matches the pin plus the series"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("  unchanged src/new.c"),
        "{}",
        out.stdout
    );
    assert_eq!(
        h.f.project_snapshot(),
        before,
        "a second import wrote something"
    );
}

/// --base pins every copy's base; --dry-run writes nothing.
#[test]
fn fixed_base_and_dry_run() {
    let h = history();
    let copy = a_c1().replace("a 1\n", "a 1 (fork)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let before = h.f.project_snapshot();
    let (code, v) = h.json(&dir, &["--base", &h.c[1], "--dry-run"]);
    assert_eq!(
        code, 1,
        "the pin's change to the last line is reverted: {v:#}"
    );
    let (code, v) = h.json(&dir, &["--base", &h.c[1], "--dry-run", "--accept-reverts"]);
    assert_eq!(code, 0);
    assert_eq!(file(&v, "src/a.c")["base"]["commit"], h.c[1]);
    assert_eq!(file(&v, "src/a.c")["base"]["distance"], -2);
    assert_eq!(v["written"], false);
    assert_eq!(h.f.project_snapshot(), before);
}

/// Bad input: a missing folder, a path upstream has no folder for, a folder passed one level too
/// deep, a binary file: exit 2 naming it, nothing written.
#[test]
fn bad_input_names_the_file_and_writes_nothing() {
    let h = history();
    let before = h.f.project_snapshot();
    let missing = h.f.t().join("no-such-copies");
    let out = h.import(&missing, &[]).code(2);
    assert!(
        out.stderr.contains("$TMP/no-such-copies: not a folder"),
        "{}",
        out.stderr
    );
    // Its kind is bad input, in the one error shape (it was `other` before issue 28).
    let out = h.import(&missing, &["--json"]).code(2);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["kind"], "input", "{v:#}");

    let dir = h.f.t().join("stray");
    write_copies(&dir, &[("src/a.c", &a_c3()), ("lib/zzz/x.c", "x\n")]);
    let out = h.import(&dir, &[]).code(2);
    assert!(
        out.stderr.contains(
            "$TMP/stray/lib/zzz/x.c: lib/zzz/x.c is not an upstream path at the pin (no folder lib/zzz there"
        ),
        "{}",
        out.stderr
    );

    let dir = h.f.t().join("deep");
    write_copies(&dir, &[("a.c", &a_c3())]);
    let out = h.import(&dir, &[]).code(2);
    assert!(
        out.stderr
            .contains("upstream has src/a.c: pass the folder that mirrors the upstream root"),
        "{}",
        out.stderr
    );

    let dir = h.f.t().join("binary");
    write_copies(&dir, &[("src/a.bin", "a\0b")]);
    let out = h.import(&dir, &[]).code(2);
    assert!(
        out.stderr.contains("$TMP/binary/src/a.bin: a binary file"),
        "{}",
        out.stderr
    );

    let dir = h.f.t().join("empty");
    std::fs::create_dir_all(&dir).unwrap();
    h.import(&dir, &[]).code(2);
    assert_eq!(h.f.project_snapshot(), before, "bad input wrote something");
}

/// A copy that already holds an existing overlay's change gets only the rest; the existing
/// overlay keeps every byte and `git am` of both gives the copy.
#[test]
fn copy_over_an_existing_overlay_carries_only_the_rest() {
    let h = history();
    let first = h.first_line_overlay();
    let old = h.f.read(h.f.root.join("overlays/up").join(&first));
    let copy = a_c3()
        .replace("a 1\n", "a 1 (overlay)\n")
        .replace("a 15\n", "a 15 (copy)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let (code, v) = h.json(&dir, &[]);
    assert_eq!(code, 0, "{v:#}");
    let a = file(&v, "src/a.c");
    assert_eq!(
        (a["added"].clone(), a["removed"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(a["diff_at_pin"], 4);
    assert_eq!(a["base"]["commit"], "$PIN");
    assert_eq!(h.f.read(h.f.root.join("overlays/up").join(&first)), old);
    h.assert_git_am_gives(&[("src/a.c", &copy)]);
    h.f.xtask(&["check"]).ok();
}

/// A malformed Base: trailer is bad input: check names the overlay file and line, exit 2.
#[test]
fn malformed_base_trailer_is_an_error_with_its_line() {
    let h = history();
    h.f.git(&h.f.work, &["fetch", "-q", "origin"]);
    h.f.git(&h.f.work, &["checkout", "-q", &h.f.pin]);
    let name = h.f.add_overlay(
        "fork",
        &[("src/a.c", Some(&a_c3().replace("a 1\n", "a 1 (fork)\n")))],
        "Overlay-Kind: local-only\nBase: 1234abc",
    );
    let text = h.f.read(h.f.root.join("overlays/up").join(&name));
    let line = text.lines().position(|l| l.starts_with("Base: ")).unwrap() + 1;
    let out = h.f.xtask(&["check"]).code(2);
    assert!(
        out.stderr.contains(&format!(
            "overlays/up/{name}:{line}: Base: expected \"<40-hex commit>\" or \"<40-hex commit> <path>\", found \"1234abc\""
        )),
        "{}",
        out.stderr
    );
}

/// SIGKILL at every write step of an import (the fault-injection hook, as in interrupt.rs): every
/// project file is old or new; after the next command recovers, the project is all old or all new;
/// importing again gives exactly the uninterrupted result.
#[test]
fn import_is_all_or_nothing_under_sigkill() {
    use crate::fixture::files_under;
    let h = history();
    let copy_b = b_c2().replace("b 1\n", "b 1 (fork)\n");
    let dir = h.copies(&[("src/b.c", &copy_b), ("src/new.c", "int x;\n")]);
    let args = ["import", dir.to_str().unwrap(), "--one-per-file"];
    let project = || files_under(&h.f.root, &["target"]);
    h.import(&dir, &["--dry-run"]).ok(); // the cache is made; the steps below are import's own
    let old = project();
    h.f.xtask(&args).ok();
    let new = project();
    assert_ne!(old, new);
    let reset = || {
        for p in project().keys() {
            std::fs::remove_file(h.f.root.join(p)).unwrap();
        }
        for (p, bytes) in &old {
            std::fs::write(h.f.root.join(p), bytes).unwrap();
        }
    };
    reset();
    let log = h.f.t().join("fault-count.log");
    h.f.xtask_env(&args, &[("OVERLAY_FAULT_COUNT", log.to_str().unwrap())])
        .ok();
    let steps = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    assert!(steps >= 4, "only {steps} write steps");
    eprintln!("import --one-per-file: {steps} write steps");
    for n in 1..=steps {
        reset();
        let out =
            h.f.xtask_env(&args, &[("OVERLAY_FAULT_KILL_AFTER", &n.to_string())]);
        assert_eq!(out.code, -1, "step {n} did not kill import: {}", out.stderr);
        for (p, bytes) in &project() {
            let name = p.to_string_lossy();
            assert!(
                name.contains(".overlay-")
                    || old.get(p) == Some(bytes)
                    || new.get(p) == Some(bytes),
                "step {n}: {name} is neither old nor new"
            );
        }
        h.f.xtask(&["status"]).ok();
        let now = project();
        assert!(
            now == old || now == new,
            "step {n}: a mix of old and new after recovery"
        );
        h.f.xtask(&args).ok();
        assert_eq!(project(), new, "step {n}");
    }
}

mod real_mlx {
    //! `import` on the real MLX history (through the URL of this workspace's pins.toml; offline
    //! machines reach it through git's `url.<mirror>.insteadOf`). Copies made from real commits:
    //! one before `a8e24f2` added the CUDA RMSNorm backward kernels (30 commits before the pin),
    //! one before `0ff1115` added `BlockMaskedMM::eval_gpu` (423 before), one at the pin, one
    //! from `772bc8a` (11 after), each with a one-line edit, and a file MLX lacks.

    use std::path::{Path, PathBuf};
    use std::process::Command;

    use crate::fixture::run_xtask;

    const PIN: &str = "9a795735ad9a42664e08f42361b405ed570bcf1a";
    const CUDA: &str = "mlx/backend/cuda";

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_DATE", "@1767225600 +0000")
            .env("GIT_COMMITTER_DATE", "@1767225600 +0000")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn xtask(root: &Path, args: &[&str]) -> (i32, String, String) {
        run_xtask(Some(root), None, args)
    }

    /// `<commit>`'s version of `path` with its copyright line marked as the fork's.
    fn copy_from(clone: &Path, commit: &str, path: &str) -> String {
        let text = git(clone, &["show", &format!("{commit}:{path}")]);
        let marked = text.replacen("Apple Inc.\n", "Apple Inc. (fork)\n", 1);
        assert!(marked != text, "{commit}:{path} has no copyright line");
        marked
    }

    fn first_parent_distance(clone: &Path, from: &str, to: &str) -> i64 {
        git(
            clone,
            &[
                "rev-list",
                "--first-parent",
                "--count",
                &format!("{from}..{to}"),
            ],
        )
        .trim()
        .parse()
        .unwrap()
    }

    #[test]
    fn real_mlx_copies_before_at_and_after_the_pin() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let clone = t.join("mlx");
        let url = "https://github.com/ml-explore/mlx";
        git(t, &["clone", "-q", "--bare", url, clone.to_str().unwrap()]);
        let rev = |r: &str| git(&clone, &["rev-parse", r]).trim().to_string();
        let (rms_base, mm_base) = (rev("a8e24f202^"), rev("0ff1115a4^"));
        let ahead = rev("772bc8a00");
        let files: Vec<(String, String)> = vec![
            (format!("{CUDA}/rms_norm.cu"), rms_base.clone()),
            (format!("{CUDA}/matmul.cpp"), mm_base.clone()),
            (format!("{CUDA}/device/binary_ops.cuh"), PIN.to_string()),
            (
                format!("{CUDA}/scaled_dot_product_attention.cpp"),
                ahead.clone(),
            ),
        ];
        let copies = t.join("copies");
        let mut expected: Vec<(String, String)> = Vec::new();
        for (path, commit) in &files {
            let text = copy_from(&clone, commit, path);
            let p = copies.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &text).unwrap();
            expected.push((path.clone(), text));
        }
        let extra = "// the fork's own kernel\n__global__ void fork_only() {}\n";
        std::fs::write(copies.join(CUDA).join("fork_only.cu"), extra).unwrap();
        expected.push((format!("{CUDA}/fork_only.cu"), extra.to_string()));

        let root: PathBuf = t.join("project");
        std::fs::create_dir_all(root.join("overlays/mlx")).unwrap();
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        std::fs::copy(ws.join("pins.toml"), root.join("pins.toml")).unwrap();
        std::fs::write(root.join("overlays/mlx/series"), "").unwrap();
        let before = crate::fixture::files_under(&root, &["target"]);

        // Refused: the stale copies delete real upstream additions.
        let (code, stdout, stderr) = xtask(&root, &["import", copies.to_str().unwrap(), "--json"]);
        assert_eq!(code, 1, "{stdout}\n{stderr}");
        assert_eq!(crate::fixture::files_under(&root, &["target"]), before);
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let file = |p: &str| {
            v["files"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["path"] == p)
                .unwrap()
                .clone()
        };
        for (path, commit) in &files {
            let f = file(path);
            assert_eq!(f["base"]["commit"], commit.as_str(), "{path}: {f:#}");
            let d = if commit == &ahead {
                first_parent_distance(&clone, PIN, commit)
            } else {
                -first_parent_distance(&clone, commit, PIN)
            };
            assert_eq!(f["base"]["distance"], d, "{path}");
            assert_eq!(f["diff_at_base"], 2, "{path}: a one-line edit");
        }
        assert_eq!(
            file(&format!("{CUDA}/rms_norm.cu"))["base"]["distance"],
            -30
        );
        assert_eq!(
            file(&format!("{CUDA}/matmul.cpp"))["base"]["distance"],
            -423
        );
        assert_eq!(
            file(&format!("{CUDA}/scaled_dot_product_attention.cpp"))["base"]["distance"],
            11
        );
        assert_eq!(file(&format!("{CUDA}/fork_only.cu"))["status"], "new-file");
        // The findings: the backward kernel of a8e24f2 and BlockMaskedMM::eval_gpu of 0ff1115.
        let reverted = |p: &str, commit: &str, line: &str| {
            file(p)["reverts"].as_array().unwrap().iter().any(|r| {
                r["commit"] == rev(commit)
                    && r["lines"].as_array().unwrap().iter().any(|l| l == line)
            })
        };
        assert!(reverted(
            &format!("{CUDA}/rms_norm.cu"),
            "a8e24f202",
            "__global__ void rms_norm_vjp_small("
        ));
        assert!(reverted(
            &format!("{CUDA}/matmul.cpp"),
            "0ff1115a4",
            "void BlockMaskedMM::eval_gpu(const std::vector<array>& inputs, array& out) {"
        ));
        for p in [
            "device/binary_ops.cuh",
            "scaled_dot_product_attention.cpp",
            "fork_only.cu",
        ] {
            assert_eq!(
                file(&format!("{CUDA}/{p}"))["reverts"],
                serde_json::json!([]),
                "{p}"
            );
        }

        // Accepted: written, and git am of the overlay at the pin gives every copy.
        let (code, stdout, stderr) = xtask(
            &root,
            &["import", copies.to_str().unwrap(), "--accept-reverts"],
        );
        assert_eq!(code, 0, "{stdout}\n{stderr}");
        let name = "0001-import-copies.patch";
        let patch = root.join("overlays/mlx").join(name);
        let text = std::fs::read_to_string(&patch).unwrap();
        assert!(
            text.contains(&format!("Reverts-Upstream: {}\n", rev("a8e24f202"))),
            "{text}"
        );
        assert!(
            text.contains(&format!("Base: {rms_base} {CUDA}/rms_norm.cu\n")),
            "{text}"
        );
        let work = t.join("work");
        git(
            t,
            &[
                "clone",
                "-q",
                "--no-checkout",
                clone.to_str().unwrap(),
                work.to_str().unwrap(),
            ],
        );
        git(&work, &["checkout", "-q", "--detach", PIN]);
        git(&work, &["am", "-q", patch.to_str().unwrap()]);
        for (path, text) in &expected {
            assert_eq!(
                &std::fs::read_to_string(work.join(path)).unwrap(),
                text,
                "{path}"
            );
        }
        let (code, stdout, _) = xtask(&root, &["check"]);
        assert_eq!(code, 0, "{stdout}");
        let (code, stdout, _) = xtask(&root, &["import", copies.to_str().unwrap()]);
        assert_eq!(code, 0, "{stdout}");
        assert!(stdout.contains("nothing to import"), "{stdout}");
    }
}

/// A copy made before an upstream commit that only deletes lines (c2 drops `b 5`, `b 6`) brings
/// them back: refused with the deleting commit named, nothing written, until `--accept-reverts`,
/// which records that commit (repro F, issue 24).
#[test]
fn copy_bringing_back_lines_upstream_deleted_is_refused_until_accepted() {
    let h = history();
    let copy = b_c0().replace("b 10\n", "b 10 (fork)\n");
    let dir = h.copies(&[("src/b.c", &copy)]);
    let before = h.f.project_snapshot();
    let out = h.import(&dir, &["--base", &h.c[1]]).code(1);
    let named = format!(
        "brings back 2 line(s) (lines 5-6 of the copy) that {} \"b: drop two lines\" deleted after the base {}",
        &h.c[2][..12],
        &h.c[1][..12]
    );
    assert!(
        out.stdout.contains(&named) && out.stdout.contains("+ b 5"),
        "{}",
        out.stdout
    );
    assert_eq!(before, h.f.project_snapshot(), "nothing written");
    h.import(&dir, &["--base", &h.c[1], "--accept-reverts"])
        .ok();
    let ov = h.f.read(h.f.root.join("overlays/up/0001-import-b-c.patch"));
    assert!(
        ov.contains(&format!("Reverts-Upstream: {}\n", h.c[2])),
        "{ov}"
    );
    h.f.xtask(&["check"]).ok();
}

/// A copy laid over a project that already has overlays, lacking an overlay's line, would undo
/// it: refused naming the overlay, until `--accept-reverts` records `Reverts-Overlay:` (issue 24).
#[test]
fn copy_undoing_an_earlier_overlay_is_refused_until_accepted() {
    let h = history();
    let first = h.first_line_overlay();
    let copy = a_c3().replace("a 15\n", "a 15 (copy)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let before = h.f.project_snapshot();
    let out = h.import(&dir, &[]).code(1);
    assert!(
        out.stdout.contains(&format!(
            "deletes 1 line(s) (line 1) that the earlier overlay {first} adds"
        )),
        "{}",
        out.stdout
    );
    assert_eq!(before, h.f.project_snapshot(), "nothing written");
    h.import(&dir, &["--accept-reverts"]).ok();
    let ov = h.f.read(h.f.root.join("overlays/up/0002-import-a-c.patch"));
    assert!(ov.contains(&format!("Reverts-Overlay: {first}\n")), "{ov}");
    h.f.xtask(&["check"]).ok();
}

/// A copy with CRLF line endings or a byte-order mark upstream's file lacks (a Windows checkout)
/// is named with the fix, exit 2, nothing written, instead of a far base and a whole-file rewrite
/// (repro R, issue 24).
#[test]
fn crlf_and_bom_copies_are_named_with_the_fix() {
    let h = history();
    for (name, copy) in [
        ("crlf", a_c3().replace('\n', "\r\n")),
        ("bom", format!("\u{feff}{}", a_c3())),
    ] {
        let dir = h.f.t().join(format!("copies-{name}"));
        write_copies(&dir, &[("src/a.c", &copy)]);
        let before = h.f.project_snapshot();
        let out = h.import(&dir, &[]).code(2);
        let what = if name == "crlf" {
            "CRLF line endings where upstream's file has LF"
        } else {
            "byte-order mark"
        };
        assert!(
            out.stderr.contains("src/a.c")
                && out.stderr.contains(what)
                && out.stderr.contains("dos2unix"),
            "{name}: {}",
            out.stderr
        );
        assert_eq!(before, h.f.project_snapshot(), "{name}: nothing written");
    }
}

/// A copy taken before upstream deleted lines, and kept up to date with upstream's later edits,
/// is closest to the pin, where the deleted lines look like the fork's own (repro F, issue 24):
/// the report names the commit that deleted them and the way out (`--base` before it, where the
/// lines it brings back are REVERTS). Upstream here: c2 drops `b 5` and `b 6`; c6 and c7 (the new
/// pin) edit other lines of b.c, which the copy has too. A copy of the pin's own b.c plus a fork
/// line has no such lines and no warning.
#[test]
fn lines_upstream_deleted_before_the_chosen_base_are_named() {
    let mut h = history();
    let c6 = b_c2().replace("b 10\n", "b 10 (c6)\n");
    let c7 = c6.replace("b 15\n", "b 15 (c7)\n");
    h.f.commit_upstream(&[("src/b.c", &c6)], "b: edit line 10");
    let pin = h.f.commit_upstream(&[("src/b.c", &c7)], "b: edit line 15");
    h.f.pin = pin.clone();
    h.f.write_pins(&pin);
    let copy = b_c0()
        .replace("b 10\n", "b 10 (c6)\n")
        .replace("b 15\n", "b 15 (c7)\n")
        .replace("b 1\n", "b 1 (fork)\n");
    let dir = h.copies(&[("src/b.c", &copy)]);
    let (_, v) = h.json(&dir, &["--dry-run"]);
    let b = file(&v, "src/b.c");
    assert_eq!(b["base"]["distance"], 0, "the pin: {v:#}");
    assert_eq!(b["deleted_before_base"]["commit"], h.c[2], "{v:#}");
    assert_eq!(b["deleted_before_base"]["lines"], 2, "{v:#}");
    let out = h.import(&dir, &["--dry-run"]).code(0);
    let short = &h.c[2][..12];
    assert!(
        out.stdout.contains(&format!(
            "2 line(s) of the copy are upstream's before {short} \"b: drop two lines\""
        )) && out.stdout.contains(&format!("import with --base {short}^")),
        "{}",
        out.snapshot()
    );
    // The way out: at the base before the deletion, the two lines are REVERTS (exit 1).
    let out = h
        .import(&dir, &["--dry-run", "--base", &format!("{}^", h.c[2])])
        .code(1);
    assert!(
        out.stdout.contains("brings back 2 line(s)"),
        "{}",
        out.snapshot()
    );
    let dir = h.copies(&[
        ("src/b.c", &c7.replace("b 1\n", "b 1 (fork)\n")),
        ("src/c.c", "c\n"),
    ]);
    let (_, v) = h.json(&dir, &["--dry-run"]);
    assert!(
        file(&v, "src/b.c").get("deleted_before_base").is_none(),
        "{v:#}"
    );
}

/// A base found at the edge of the search says so (issue 24): with `--bound 1` the copy of a.c as
/// c0 had it (plus a fork line) is closest to c2, the oldest commit searched, which still differs
/// from it: the copy may be older than the search went, and the report warns with the way out.
/// With the default bound the search reaches c0, three commits back, and is silent; so is an
/// exact match at the edge.
#[test]
fn a_base_at_the_edge_of_the_search_is_named() {
    let h = history();
    let copy = a_c0().replace("a 3\n", "a 3 (fork)\n");
    let dir = h.copies(&[("src/a.c", &copy)]);
    let (_, v) = h.json(&dir, &["--dry-run", "--bound", "1"]);
    let a = file(&v, "src/a.c");
    assert_eq!(a["base"]["distance"], -1, "{v:#}");
    assert_eq!(a["base_at_search_edge"], true, "{v:#}");
    let out = h.import(&dir, &["--dry-run", "--bound", "1"]);
    assert!(
        out.stdout.contains("oldest commit searched (--bound 1)")
            && out.stdout.contains("widen --bound"),
        "{}",
        out.snapshot()
    );
    let (_, v) = h.json(&dir, &["--dry-run"]);
    let a = file(&v, "src/a.c");
    assert_eq!(a["base"]["commit"], h.c[0], "{v:#}");
    assert!(a.get("base_at_search_edge").is_none(), "{v:#}");
    // The pin's own b.c at the edge of a one-commit search: an exact match needs no warning.
    let dir = h.copies(&[("src/b.c", &b_c2()), ("src/c.c", &lines("c", 5))]);
    let (_, v) = h.json(&dir, &["--dry-run", "--bound", "1"]);
    assert!(
        file(&v, "src/b.c").get("base_at_search_edge").is_none(),
        "{v:#}"
    );
}
