//! Synthetic upstream histories built on the fly with real git and fixed dates (as gitoxide's
//! fixtures do), plus a project folder (pins.toml + overlays) pointing at them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    /// The synthetic upstream (a normal repository).
    pub upstream: PathBuf,
    /// The project: pins.toml, overlays/up/.
    pub root: PathBuf,
    /// Where overlays are authored with git (a clone of upstream).
    pub work: PathBuf,
    pub cache: PathBuf,
    pub pin: String,
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    #[track_caller]
    pub fn ok(self) -> Out {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    /// Exit code, stdout and stderr together, for a snapshot that shows the whole outcome:
    /// `exit N`, then each stream under its `--- stdout` / `--- stderr` header.
    pub fn snapshot(&self) -> String {
        let mut s = format!("exit {}\n", self.code);
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            s.push_str(&format!("--- {name}\n{text}"));
            if !text.is_empty() && !text.ends_with('\n') {
                s.push('\n');
            }
        }
        s
    }
    #[track_caller]
    pub fn code(self, code: i32) -> Out {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// This workspace (the repository root above `xtask/`).
pub fn workspace() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The xtask binary outside a fixture's project: with `--root root` when given (else in this
/// test's folder, so on this workspace's pins.toml) and the tool's cache in `cache` when given.
/// Exit code, stdout and stderr as they are (nothing scrubbed).
pub fn run_xtask(
    root: Option<&Path>,
    cache: Option<&Path>,
    args: &[&str],
) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    if let Some(root) = root {
        cmd.arg("--root").arg(root);
    }
    cmd.args(args);
    if let Some(cache) = cache {
        cmd.env("OVERLAY_CACHE_DIR", cache);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// git with the fixture's identity and dates but the user's real global config, which carries the
/// `insteadOf` rule that reaches an upstream's local mirror (the real-history tests); its stdout.
pub fn real_git(dir: &Path, home: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.args(args).current_dir(dir);
    git_env(&mut cmd, home);
    cmd.env_remove("GIT_CONFIG_GLOBAL")
        .env("HOME", std::env::var_os("HOME").unwrap_or_default());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub fn git_env(cmd: &mut Command, home: &Path) {
    cmd.env("HOME", home)
        .env("GIT_CONFIG_GLOBAL", home.join("gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada Overlay")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada Overlay")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_AUTHOR_DATE", "@1767225600 +0000")
        .env("GIT_COMMITTER_DATE", "@1767225600 +0000")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
}

impl Fixture {
    /// An upstream with `files` in its first commit, pinned there, with an empty series.
    pub fn new(files: &[(&str, &str)]) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().to_path_buf();
        std::fs::write(
            t.join("gitconfig"),
            "[init]\n\tdefaultBranch = main\n[core]\n\tautocrlf = false\n",
        )
        .unwrap();
        let upstream = t.join("upstream");
        let root = t.join("project");
        let work = t.join("work");
        std::fs::create_dir_all(&upstream).unwrap();
        std::fs::create_dir_all(root.join("overlays/up")).unwrap();
        let mut f = Fixture {
            tmp,
            upstream,
            root,
            work,
            cache: t.join("cache"),
            pin: String::new(),
        };
        f.git(&f.upstream.clone(), &["init", "-q"]);
        f.pin = f.commit_upstream(files, "initial");
        f.git(&t, &["clone", "-q", f.upstream.to_str().unwrap(), "work"]);
        f.write_pins(&f.pin.clone());
        std::fs::write(f.root.join("overlays/up/series"), "").unwrap();
        f
    }

    pub fn t(&self) -> &Path {
        self.tmp.path()
    }

    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let mut cmd = Command::new("git");
        cmd.args(args).current_dir(dir);
        git_env(&mut cmd, self.t());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn write_files(dir: &Path, files: &[(&str, &str)]) {
        for (p, content) in files {
            let path = dir.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    /// Commits `files` to the upstream; returns the commit id.
    pub fn commit_upstream(&self, files: &[(&str, &str)], msg: &str) -> String {
        Self::write_files(&self.upstream, files);
        self.git(&self.upstream, &["add", "-A"]);
        self.git(&self.upstream, &["commit", "-q", "-m", msg]);
        self.git(&self.upstream, &["rev-parse", "HEAD"])
    }

    pub fn write_pins(&self, rev: &str) {
        let pins = format!(
            "[upstream.up]\nurl = \"{}\"\nrev = \"{rev}\"\noverlays = \"overlays/up\"\nbranch = \"main\"\n",
            self.upstream.display()
        );
        std::fs::write(self.root.join("pins.toml"), pins).unwrap();
    }

    /// Authors an overlay with git on top of the previous ones: applies `edit` to the work clone
    /// (path -> Some(content) or None to delete), commits with `trailers`, and `git format-patch`es it
    /// into the series. Returns the overlay's file name.
    pub fn add_overlay(
        &self,
        subject: &str,
        edit: &[(&str, Option<&str>)],
        trailers: &str,
    ) -> String {
        for (p, c) in edit {
            let path = self.work.join(p);
            match c {
                Some(c) => {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(&path, c).unwrap();
                }
                None => std::fs::remove_file(&path).unwrap(),
            }
        }
        self.git(&self.work, &["add", "-A"]);
        let msg = format!("{subject}\n\nWhy: a test needs it.\n\n{trailers}");
        self.git(&self.work, &["commit", "-q", "-m", &msg]);
        self.format_patch_head()
    }

    pub fn format_patch_head(&self) -> String {
        let series_path = self.root.join("overlays/up/series");
        let series = std::fs::read_to_string(&series_path).unwrap();
        let n = series
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count()
            + 1;
        let dir = self.root.join("overlays/up");
        let name = self.git(
            &self.work,
            &[
                "format-patch",
                "-1",
                "-M",
                "--start-number",
                &n.to_string(),
                "-o",
                dir.to_str().unwrap(),
            ],
        );
        let name = Path::new(&name)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        std::fs::write(&series_path, format!("{series}{name}\n")).unwrap();
        name
    }

    /// Makes the project a git repository (the fork's own history, with the tool's state ignored)
    /// and commits it as it is; returns the commit id.
    pub fn init_fork(&self) -> String {
        std::fs::write(self.root.join(".gitignore"), "/target/\n/.overlay/\n").unwrap();
        self.git(&self.root, &["init", "-q"]);
        self.commit_fork("the fork at its pin")
    }

    /// Commits everything in the project (`git add -A`); returns the commit id.
    pub fn commit_fork(&self, msg: &str) -> String {
        self.git(&self.root, &["add", "-A"]);
        self.git(&self.root, &["commit", "-q", "-m", msg]);
        self.git(&self.root, &["rev-parse", "HEAD"])
    }

    pub fn xtask(&self, args: &[&str]) -> Out {
        self.xtask_env(args, &[])
    }

    /// `xtask` with extra environment variables (the fault-injection hook, say).
    pub fn xtask_env(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut cmd = self.command(args);
        cmd.envs(env.iter().copied());
        let out = cmd.output().unwrap();
        self.out(out)
    }

    /// The command `xtask` runs, to spawn several at once.
    /// `XTASK_TEST_BIN` runs the tests against another build of xtask (say, the one before a fix,
    /// to see a regression test fail there).
    pub fn command(&self, args: &[&str]) -> Command {
        // XTASK_UNDER_TEST (or XTASK_TEST_BIN) runs the tests against another build (an older
        // one, to see a regression test fail before its fix).
        let bin = std::env::var_os("XTASK_UNDER_TEST")
            .or_else(|| std::env::var_os("XTASK_TEST_BIN"))
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_xtask").into());
        let mut cmd = Command::new(bin);
        cmd.arg("--root")
            .arg(&self.root)
            .args(args)
            .env("OVERLAY_CACHE_DIR", &self.cache);
        git_env(&mut cmd, self.t());
        cmd
    }

    pub fn out(&self, out: std::process::Output) -> Out {
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: self.scrub(&String::from_utf8_lossy(&out.stdout)),
            stderr: self.scrub(&String::from_utf8_lossy(&out.stderr)),
        }
    }

    /// Replaces the temp dir (and its JSON-escaped form) so reports snapshot stably.
    pub fn scrub(&self, s: &str) -> String {
        let t = self.t().to_str().unwrap();
        s.replace(t, "$TMP")
            .replace(&self.pin, "$PIN")
            .replace(&self.pin[..12], "$PIN12")
    }

    /// The tree `git am` produces from the series on top of the pin.
    pub fn git_am_tree(&self) -> PathBuf {
        self.git_am_tree_at(&self.pin)
    }

    /// The tree `git am` produces from the series on top of `rev`.
    pub fn git_am_tree_at(&self, rev: &str) -> PathBuf {
        let dir = self.t().join(format!("am-{}", rand_suffix()));
        self.git(
            self.t(),
            &[
                "clone",
                "-q",
                self.upstream.to_str().unwrap(),
                dir.to_str().unwrap(),
            ],
        );
        self.git(&dir, &["checkout", "-q", "--detach", rev]);
        let series = std::fs::read_to_string(self.root.join("overlays/up/series")).unwrap();
        for name in series
            .lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| !l.is_empty())
        {
            let p = self.root.join("overlays/up").join(name);
            self.git(&dir, &["am", "-q", "--keep-cr", p.to_str().unwrap()]);
        }
        dir
    }

    /// Unpacks a `build-mlx --bundle` archive into the temporary folder `to`; returns its
    /// `mlx-cuda-bundle` folder.
    pub fn unpack_bundle(&self, archive: &Path, to: &str) -> PathBuf {
        let dir = self.t().join(to);
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(archive)
            .arg("-C")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "tar -xzf {}", archive.display());
        dir.join("mlx-cuda-bundle")
    }

    pub fn read(&self, p: impl AsRef<Path>) -> String {
        std::fs::read_to_string(p.as_ref()).unwrap()
    }

    /// Every byte under `overlays/` and pins.toml: to prove a command changed nothing (the
    /// tool's own state, `target/` and `.overlay/`, left out).
    pub fn project_snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(&self.root, &["target", ".overlay"])
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// All files below `dir` (relative path -> bytes), skipping `.git` and the named top-level folders.
pub fn files_under(dir: &Path, skip: &[&str]) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, d: &Path, skip: &[&str], out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let name = rel.to_str().unwrap();
            if name == ".git" || skip.contains(&name) {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, skip, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, skip, &mut out);
    }
    out
}

/// Compares a materialized tree with a git work tree (content and executable bits).
#[track_caller]
pub fn assert_same_tree(applied: &Path, git_tree: &Path) {
    let a = files_under(applied, &[".overlay-state.json"]);
    let b = files_under(git_tree, &[]);
    let ka: Vec<_> = a.keys().collect();
    let kb: Vec<_> = b.keys().collect();
    assert_eq!(ka, kb, "file lists differ");
    for (k, v) in &a {
        assert!(
            v == &b[k],
            "{} differs:\n--- apply\n{}\n--- git am\n{}",
            k.display(),
            String::from_utf8_lossy(v),
            String::from_utf8_lossy(&b[k])
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let ma = std::fs::metadata(applied.join(k))
                .unwrap()
                .permissions()
                .mode()
                & 0o111;
            let mb = std::fs::metadata(git_tree.join(k))
                .unwrap()
                .permissions()
                .mode()
                & 0o111;
            assert_eq!(ma != 0, mb != 0, "{}: executable bit differs", k.display());
        }
    }
}
