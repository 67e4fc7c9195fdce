//! `export-upstream`'s verification with git itself: the exported series is `git am`ed onto the
//! target commit in a scratch clone of the upstream cache before anything is written. The scratch
//! folder is the caller's (a temporary directory), never a user's file, so these writes do not go
//! through `fsx`.

use std::path::{Path, PathBuf};

use crate::export::Exported;
use crate::upstream::UpstreamRepo;
use crate::{Error, Result};

/// What `git am` left: the scratch clone and its HEAD (the exported series' last commit).
#[derive(Debug, Clone)]
pub struct Verified {
    /// The scratch clone the series was applied in.
    pub clone: PathBuf,
    /// Its HEAD after `git am` (full hex): the exported series' last commit.
    pub head: String,
}

/// `git ARGS` in `dir`: its stdout as it is, or an error holding `context` (default: the command)
/// and git's stderr.
pub fn git_output_in(dir: &Path, args: &[&str], context: Option<String>) -> Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| Error::io("git", e))?;
    if !out.status.success() {
        let what = format!("git {}", args.join(" "));
        let context = context.map_or(what.clone(), |c| format!("{c}: {what}"));
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(Error::git(context, git2::Error::from_str(&stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `git ARGS` in `dir`: its stdout as it is, or git's stderr in the error.
pub fn git_output(dir: &Path, args: &[&str]) -> Result<String> {
    git_output_in(dir, args, None)
}

fn run_git(dir: &Path, args: &[&str], context: Option<String>) -> Result<String> {
    Ok(git_output_in(dir, args, context)?.trim().to_string())
}

/// `git am`s the exported series onto `onto` in a scratch clone of the upstream cache under
/// `scratch`; an error names the first patch that does not apply.
pub fn git_am_onto(
    scratch: &Path,
    repo: &UpstreamRepo,
    exported: &[Exported],
    onto: git2::Oid,
) -> Result<Verified> {
    let patches = scratch.join("patches");
    std::fs::create_dir_all(&patches).map_err(|e| Error::io(&patches, e))?;
    for e in exported {
        let p = patches.join(&e.file_name);
        std::fs::write(&p, &e.raw).map_err(|err| Error::io(&p, err))?;
    }
    let clone = scratch.join("upstream");
    run_git(
        scratch,
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            "--shared",
            &repo.cache_path.to_string_lossy(),
            "upstream",
        ],
        None,
    )?;
    run_git(
        &clone,
        &["checkout", "--quiet", "--detach", &onto.to_string()],
        None,
    )?;
    let onto_short = onto.to_string()[..12].to_string();
    for e in exported {
        run_git(
            &clone,
            &[
                "-c",
                "user.name=export-upstream",
                "-c",
                "user.email=export@localhost",
                "am",
                "--quiet",
                "--committer-date-is-author-date",
                &patches.join(&e.file_name).to_string_lossy(),
            ],
            Some(format!(
                "{} does not `git am` onto {onto_short}",
                e.file_name
            )),
        )?;
    }
    let head = run_git(&clone, &["rev-parse", "HEAD"], None)?;
    Ok(Verified { clone, head })
}
