//! bump-pr: the bump committed on a new branch (to upstream's head, or the newest clean commit),
//! PR.md / ISSUE.md, the checkout left as it was found; and ci/bump-pr.sh, the weekly workflow's
//! steps, against a local bare remote and a stand-in `gh` that records its calls.

use std::path::{Path, PathBuf};

use crate::fixture::{Fixture, workspace};
use crate::interdiff::fork_with_moving_upstream;

fn lines(at: usize, with: &str) -> String {
    (1..=30)
        .map(|i| {
            if i == at {
                format!("{with}\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect()
}

fn branches(f: &Fixture) -> String {
    f.git(&f.root, &["branch", "--format=%(refname:short)"])
}

fn pin_at(f: &Fixture, rev: &str) -> String {
    let pins = f.git(&f.root, &["show", &format!("{rev}:pins.toml")]);
    pins.lines()
        .find_map(|l| l.strip_prefix("rev = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string()
}

#[test]
fn a_clean_bump_is_committed_on_its_branch_and_the_checkout_is_kept() {
    let (f, new) = fork_with_moving_upstream();
    let head = f.git(&f.root, &["rev-parse", "HEAD"]);
    let out = f.xtask(&["bump-pr"]).ok();
    let branch = format!("bump/{}", &new[..12]);
    assert!(
        out.stdout.contains(&format!("committed on {branch}")),
        "{}",
        out.stdout
    );
    assert_eq!(pin_at(&f, &branch), new);
    assert_eq!(f.git(&f.root, &["rev-parse", &format!("{branch}~1")]), head);
    // Back where it was: same branch, same commit, nothing uncommitted.
    assert_eq!(
        f.git(&f.root, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
    assert_eq!(f.git(&f.root, &["status", "--porcelain"]), "");
    let pr = f.read(f.root.join("target/bump-pr/PR.md"));
    for want in [
        &format!("## Bump up to `{}`", &new[..12]) as &str,
        "### Overlay drift: up",
        "| 0001-Change-line-10.patch | moved |",
        "| 0001-Change-line-10.patch | context | hunk headers",
        "| 0002-Change-b.patch | local-only | - |",
        &format!("git push origin {branch}"),
    ] {
        assert!(pr.contains(want), "{want:?} not in\n{pr}");
    }
    assert!(!pr.contains("What stops the bump"), "{pr}");
    // The branch exists now: a second run refuses before touching anything.
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr"]).code(2);
    assert!(
        out.stderr
            .contains(&format!("branch {branch} already exists")),
        "{}",
        out.stderr
    );
    assert_eq!(before, (branches(&f), f.project_snapshot()));
}

/// Upstream moves line 10's neighbourhood cleanly, then conflicts with the overlay on line 10.
fn fork_with_a_later_conflict() -> (Fixture, String, String) {
    let (f, grow) = fork_with_moving_upstream();
    let mut text = String::from("new top\n");
    text.push_str(&lines(10, "upstream TEN"));
    let conflict = f.commit_upstream(&[("a.txt", &text)], "Rewrite line ten upstream");
    (f, grow, conflict)
}

#[test]
fn a_bump_that_conflicts_stops_at_the_newest_clean_commit_and_names_what_stops_it() {
    let (f, grow, conflict) = fork_with_a_later_conflict();
    let out = f.xtask(&["bump-pr", "--branch", "weekly"]).ok();
    assert!(out.stdout.contains("committed on weekly"), "{}", out.stdout);
    assert_eq!(pin_at(&f, "weekly"), grow, "the commit before the conflict");
    let pr = f.read(f.root.join("target/bump-pr/PR.md"));
    let stop = format!(
        "- **0001-Change-line-10.patch**: conflict since `{}` Rewrite line ten upstream; conflicts in `a.txt`",
        &conflict[..12]
    );
    assert!(pr.contains(&stop), "{pr}");
    assert!(pr.contains(&format!("bump-pin {conflict}")), "{pr}");
}

#[test]
fn a_conflict_at_the_next_commit_writes_the_forecast_and_bumps_nothing() {
    let f = Fixture::new(&[("a.txt", &lines(0, ""))]);
    f.add_overlay(
        "Ten",
        &[("a.txt", Some(&lines(10, "TEN")))],
        "Overlay-Kind: local-only",
    );
    f.init_fork();
    let conflict = f.commit_upstream(&[("a.txt", &lines(10, "upstream TEN"))], "Theirs");
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr"]).code(1);
    assert!(out.stdout.contains("cannot move"), "{}", out.stdout);
    assert_eq!(
        before,
        (branches(&f), f.project_snapshot()),
        "no branch, no commit"
    );
    let json = f.xtask(&["bump-pr", "--json"]).code(1);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        (
            &v["schema"],
            &v["to"],
            &v["branch"],
            &v["conflicts_beyond"][0]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!("$PIN"),
            &serde_json::Value::Null,
            &serde_json::json!("0001-Ten.patch")
        ),
        "{}",
        json.stdout
    );
    let issue = f.read(f.root.join("target/bump-pr/ISSUE.md"));
    assert!(
        issue.contains(&format!("since `{}` Theirs", &conflict[..12])),
        "{issue}"
    );
    assert!(!f.root.join("target/bump-pr/PR.md").exists());
}

#[test]
fn a_dirty_tree_is_refused_and_a_failed_bump_puts_the_branch_back() {
    let (f, _) = fork_with_moving_upstream();
    std::fs::write(f.root.join("notes.txt"), "mine\n").unwrap();
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr"]).code(2);
    assert!(
        out.stderr
            .contains("uncommitted changes (1 path(s), first `?? notes.txt`)"),
        "{}",
        out.stderr
    );
    assert_eq!(before, (branches(&f), f.project_snapshot()));
    std::fs::remove_file(f.root.join("notes.txt")).unwrap();
    // An edit in the applied tree (ignored by git) makes bump-pin refuse once the branch exists.
    f.xtask(&["apply"]).ok();
    std::fs::write(f.root.join("target/apply/up/b.txt"), "edited\n").unwrap();
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr"]).code(2);
    assert!(
        out.stderr
            .contains("the original branch is checked out again"),
        "{}",
        out.stderr
    );
    assert_eq!(before, (branches(&f), f.project_snapshot()));
    assert_eq!(
        f.git(&f.root, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
}

#[test]
fn the_workflow_template_runs_the_tested_script_weekly_with_the_rights_it_needs() {
    let yml =
        std::fs::read_to_string(workspace().join("examples/github-workflows/bump-pr.yml")).unwrap();
    for want in [
        "run: sh ci/bump-pr.sh",
        "- cron: ",
        "contents: write",
        "pull-requests: write",
        "issues: write",
        "fetch-depth: 0",
        "GH_TOKEN: ",
    ] {
        assert!(
            yml.contains(want),
            "{want:?} not in examples/github-workflows/bump-pr.yml"
        );
    }
}

/// A stand-in `gh` first on PATH: appends each call to `gh.log`, answers `pr list`/`issue list`
/// with the number in `pr-number`/`issue-number` (none: no open one).
fn stand_in_gh(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let gh = bin.join("gh");
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> {d}/gh.log\ncase \"$1 $2\" in\n  \"pr list\") cat {d}/pr-number 2>/dev/null ;;\n  \"issue list\") cat {d}/issue-number 2>/dev/null ;;\nesac\nexit 0\n",
        d = dir.display()
    );
    std::fs::write(&gh, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn run_script(f: &Fixture, bin: &Path) -> crate::fixture::Out {
    let xtask = format!(
        "{} --root {}",
        env!("CARGO_BIN_EXE_xtask"),
        f.root.display()
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut cmd = std::process::Command::new("sh");
    cmd.arg(workspace().join("ci/bump-pr.sh"))
        .current_dir(&f.root)
        .env("XTASK", xtask)
        .env("OVERLAY_CACHE_DIR", &f.cache);
    crate::fixture::git_env(&mut cmd, f.t());
    cmd.env("PATH", path);
    f.out(cmd.output().unwrap())
}

#[test]
fn the_weekly_script_opens_then_updates_one_pr_and_opens_an_issue_when_blocked() {
    let (f, grow) = fork_with_moving_upstream();
    let remote = f.t().join("remote.git");
    f.git(
        f.t(),
        &[
            "clone",
            "-q",
            "--bare",
            f.root.to_str().unwrap(),
            remote.to_str().unwrap(),
        ],
    );
    f.git(
        &f.root,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    let gh = f.t().join("gh");
    let bin = stand_in_gh(&gh);
    run_script(&f, &bin).ok();
    let pushed = f.git(&remote, &["rev-parse", "bump/upstream"]);
    assert_eq!(pin_at(&f, &pushed), grow);
    let title = format!("Bump up to {}", &grow[..12]);
    let log = f.read(gh.join("gh.log"));
    assert_eq!(
        log,
        format!(
            "pr list --head bump/upstream --state open --json number --jq .[0].number\npr create --head bump/upstream --base main --title {title} --body-file target/bump-pr/PR.md\n"
        )
    );
    // Next week: upstream moved on, the PR from the branch is open (#7): updated, force-pushed.
    f.git(&f.root, &["branch", "-D", "bump/upstream"]);
    let more = f.commit_upstream(&[("c.txt", "c\n")], "more");
    std::fs::write(gh.join("pr-number"), "7\n").unwrap();
    std::fs::remove_file(gh.join("gh.log")).unwrap();
    run_script(&f, &bin).ok();
    assert_eq!(
        pin_at(&f, &f.git(&remote, &["rev-parse", "bump/upstream"])),
        more
    );
    let log = f.read(gh.join("gh.log"));
    assert!(
        log.ends_with(&format!(
            "pr edit 7 --title Bump up to {} --body-file target/bump-pr/PR.md\n",
            &more[..12]
        )),
        "{log}"
    );
    // The PR is merged; then upstream conflicts at the very next commit: one issue, no push.
    f.git(&f.root, &["branch", "-D", "bump/upstream"]);
    f.git(&f.root, &["fetch", "-q", "origin", "bump/upstream"]);
    f.git(&f.root, &["merge", "-q", "--ff-only", "FETCH_HEAD"]);
    let text = f
        .read(f.upstream.join("a.txt"))
        .replace("line 10\n", "upstream ten\n");
    f.commit_upstream(&[("a.txt", &text)], "Theirs");
    std::fs::remove_file(gh.join("gh.log")).unwrap();
    let out = run_script(&f, &bin).ok();
    assert!(out.stdout.contains("opened an issue"), "{}", out.stdout);
    let log = f.read(gh.join("gh.log"));
    assert!(log.starts_with("issue list --state open --search"), "{log}");
    assert!(
        log.ends_with("issue create --title Overlay bump blocked: the next upstream commit needs a resolution --body-file target/bump-pr/ISSUE.md\n"),
        "{log}"
    );
}

/// Real MLX history: the workspace's own series, bumped toward 846d176, stops before 772bc8a00
/// (force_fused, where 0013 and 0014 conflict) and commits the bump to its first parent; the
/// interdiff of that bump is context only.
#[test]
fn real_mlx_bump_pr_stops_before_the_first_conflict() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fork");
    std::fs::create_dir_all(root.join("overlays")).unwrap();
    std::fs::copy(workspace().join("pins.toml"), root.join("pins.toml")).unwrap();
    for up in ["mlx", "ggml"] {
        let to = root.join("overlays").join(up);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(workspace().join("overlays").join(up)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
    std::fs::write(root.join(".gitignore"), "/target/\n/.overlay/\n").unwrap();
    let git = |args: &[&str]| crate::fixture::real_git(&root, tmp.path(), args);
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fork"]);
    let run = |args: &[&str]| crate::fixture::run_xtask(Some(&root), None, args);
    let (code, out, err) = run(&["bump-pr", "--to", "846d176", "--branch", "bump"]);
    assert_eq!(code, 0, "{out}{err}");
    let pins = git(&["show", "bump:pins.toml"]);
    let pr = std::fs::read_to_string(root.join("target/bump-pr/PR.md")).unwrap();
    let stopped_at = pr
        .lines()
        .find_map(|l| l.strip_prefix("## Bump mlx to `"))
        .unwrap()
        .trim_end_matches('`')
        .to_string();
    assert!(pins.contains(&format!("rev = \"{stopped_at}")), "{pins}");
    assert!(
        pr.contains("- **0013-cuda-sdpa-vector-rows-under-streamed-policy.patch**: conflict since `772bc8a00100`"),
        "{pr}"
    );
    // The commit it stopped at is 772bc8a00's first parent.
    let url = "https://github.com/ml-explore/mlx";
    let t = tmp.path();
    crate::fixture::real_git(t, t, &["clone", "-q", "--bare", url, "mlx.git"]);
    let parent = crate::fixture::real_git(&t.join("mlx.git"), t, &["rev-parse", "772bc8a00100^1"]);
    assert!(parent.starts_with(&stopped_at), "{parent} {stopped_at}");
    let (code, out, err) = run(&[
        "interdiff",
        "--from",
        "HEAD",
        "--to",
        "bump",
        "--lint-refresh",
    ]);
    assert_eq!(code, 0, "a clean bump changes context only:\n{out}{err}");
    // 0014 is context-drift there (3a6219917 changed use_fallback around its hunk #8): its
    // overlay moved and took new context, its own lines are the same; every other overlay of
    // the series is unchanged.
    let series = std::fs::read_to_string(root.join("overlays/mlx/series")).unwrap();
    let n = series
        .lines()
        .filter(|l| l.trim_end().ends_with(".patch") && !l.starts_with('#'))
        .count();
    assert!(n >= 14, "{series}");
    assert!(
        out.contains(&format!("{n} overlay(s): 1 context, {} unchanged", n - 1)),
        "{out}"
    );
    assert!(
        out.contains("context     0014-metal-sdpa-vector-rows-invariant.patch"),
        "{out}"
    );
    // One added line of a real overlay edited in the working tree: content, not a refresh.
    let p = root.join("overlays/mlx/0009-cpu-sgemm-rows-under-streamed-policy.patch");
    let text = std::fs::read_to_string(&p).unwrap();
    let added = text
        .lines()
        .find(|l| l.starts_with('+') && !l.starts_with("+++") && l.len() > 8)
        .unwrap();
    std::fs::write(&p, text.replacen(added, &format!("{added} // edited"), 1)).unwrap();
    let (code, out, err) = run(&["interdiff", "--lint-refresh"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("        -{added}\n        +{added} // edited\n"))
            && out.contains("not a refresh: 0009-cpu-sgemm-rows-under-streamed-policy.patch: its content changed (lines in "),
        "{out}"
    );
}

#[test]
fn a_target_behind_the_pin_is_refused_before_anything() {
    let (f, grow) = fork_with_moving_upstream();
    f.write_pins(&grow);
    f.commit_fork("pinned at grow by hand");
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr", "--to", &f.pin]).code(2);
    assert!(
        out.stderr
            .contains("is not on its first-parent history; nothing was changed"),
        "{}",
        out.stderr
    );
    assert_eq!(before, (branches(&f), f.project_snapshot()));
}

#[test]
fn at_upstreams_head_there_is_nothing_to_do() {
    let f = Fixture::new(&[("a.txt", &lines(0, ""))]);
    f.init_fork();
    let before = (branches(&f), f.project_snapshot());
    let out = f.xtask(&["bump-pr"]).ok();
    assert_eq!(
        out.stdout,
        "bump-pr: up is already pinned at $PIN12; nothing to do\n"
    );
    assert_eq!(before, (branches(&f), f.project_snapshot()));
    assert!(!f.root.join("target/bump-pr").exists());
    // The weekly script then calls no gh and pushes nothing.
    let gh = f.t().join("gh");
    let out = run_script(&f, &stand_in_gh(&gh)).ok();
    assert!(out.stdout.contains("nothing to do"), "{}", out.stdout);
    assert!(!gh.join("gh.log").exists());
}
