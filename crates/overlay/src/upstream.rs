//! Upstream access through a bare cache clone per upstream URL (git2). Files are read as blobs at a
//! commit; nothing is checked out. The cache is keyed by the URL after git's `url.<base>.insteadOf`
//! rewriting, so a changed URL never reuses another repository's cache.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Refusal, Result};
use crate::tree::{BlobSource, Content, Entry, Tree};

/// The cache root: `$OVERLAY_CACHE_DIR`, else `$XDG_CACHE_HOME/overlay`, else the platform's user
/// cache (`~/Library/Caches/overlay` on macOS, `~/.cache/overlay` elsewhere).
pub fn default_cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("OVERLAY_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("overlay");
    }
    // The platform's convention (etcetera's native strategy: Apple's on macOS, XDG elsewhere).
    use etcetera::BaseStrategy as _;
    etcetera::base_strategy::choose_native_strategy()
        .map(|s| s.cache_dir())
        .unwrap_or_else(|_| std::env::temp_dir())
        .join("overlay")
}

/// Applies git's `url.<base>.insteadOf` rules (longest match wins, as in git).
pub fn rewrite_url(url: &str) -> Result<String> {
    let cfg = match git2::Config::open_default() {
        Ok(c) => c,
        Err(_) => return Ok(url.to_string()),
    };
    let mut best: Option<(usize, String)> = None;
    let mut entries = cfg
        .entries(Some(r"^url\..*\.insteadof$"))
        .map_err(|e| Error::git("reading git config", e))?;
    while let Some(entry) = entries.next() {
        let entry = entry.map_err(|e| Error::git("reading git config", e))?;
        let (Ok(name), Ok(prefix)) = (entry.name(), entry.value()) else {
            continue;
        };
        let base = &name["url.".len()..name.len() - ".insteadof".len()];
        if url.starts_with(prefix) && best.as_ref().is_none_or(|(len, _)| prefix.len() > *len) {
            best = Some((prefix.len(), format!("{base}{}", &url[prefix.len()..])));
        }
    }
    Ok(best.map_or_else(|| url.to_string(), |(_, u)| u))
}

/// What opening or fetching an upstream's cache clone reports while it works (the engine prints
/// nothing: the caller shows these).
#[derive(Debug, Clone)]
pub enum FetchProgress {
    /// Another process holds the cache clone's lock; this one waits for it.
    Waiting {
        /// The cache clone.
        cache_path: PathBuf,
    },
    /// Objects received, for a progress bar.
    Transfer {
        /// Objects received so far.
        received_objects: usize,
        /// Objects to receive.
        total_objects: usize,
        /// Bytes received so far.
        received_bytes: usize,
    },
}

/// The bare cache clone of one upstream.
pub struct UpstreamRepo {
    repo: git2::Repository,
    /// The URL pins.toml names (what errors show; a local mirror is git's business).
    pub url: String,
    /// The URL after rewriting: what is actually fetched.
    pub effective_url: String,
    /// Where the clone is.
    pub cache_path: PathBuf,
}

impl BlobSource for UpstreamRepo {
    fn blob(&self, id: git2::Oid) -> Result<Vec<u8>> {
        let blob = self
            .repo
            .find_blob(id)
            .map_err(|e| Error::git(format!("reading blob {id}"), e))?;
        Ok(blob.content().to_vec())
    }
}

/// The repository behind a local path or `file://` URL, if that is what the URL is.
fn local_repo(url: &str) -> Option<git2::Repository> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    if url.contains("://") && !url.starts_with("file://") {
        return None;
    }
    let p = Path::new(path);
    if !p.exists() {
        return None;
    }
    git2::Repository::open(p).ok()
}

fn url_key(url: &str) -> String {
    let id =
        git2::Oid::hash_object(git2::ObjectType::Blob, url.as_bytes()).expect("in-memory hash");
    id.to_string()[..16].to_string()
}

/// Holds an exclusive lock on a cache entry while alive.
pub struct CacheLock(#[allow(dead_code)] File);

/// Takes the exclusive lock on the cache entry at `path`, calling `on_wait` once if it must wait.
pub fn lock_exclusive(path: &Path, on_wait: &mut dyn FnMut()) -> Result<CacheLock> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).at(parent)?;
    }
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .at(path)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            on_wait();
            f.lock().at(path)?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
    }
    Ok(CacheLock(f))
}

impl UpstreamRepo {
    /// Opens (creating if needed) the cache clone for `url` and makes sure `rev` is present,
    /// fetching only when it is missing.
    pub fn open(
        cache_root: &Path,
        name: &str,
        url: &str,
        rev: &str,
        progress: &mut dyn FnMut(FetchProgress),
    ) -> Result<UpstreamRepo> {
        let effective_url = rewrite_url(url)?;
        let cache_path = cache_root
            .join("upstreams")
            .join(format!("{name}-{}.git", url_key(&effective_url)));
        let _lock = lock_exclusive(&cache_path.with_extension("lock"), &mut || {
            progress(FetchProgress::Waiting {
                cache_path: cache_path.clone(),
            });
        })?;
        let mut fresh = false;
        let repo = match git2::Repository::open_bare(&cache_path) {
            Ok(r) => r,
            Err(_) => {
                fresh = true;
                // Create in a temp dir and rename, so an interrupted init never leaves a half repo.
                std::fs::create_dir_all(cache_root.join("upstreams")).at(cache_root)?;
                let tmp = cache_path.with_extension(format!("tmp{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&tmp);
                git2::Repository::init_bare(&tmp)
                    .map_err(|e| Error::git(format!("creating {}", tmp.display()), e))?;
                std::fs::rename(&tmp, &cache_path).at(&cache_path)?;
                git2::Repository::open_bare(&cache_path)
                    .map_err(|e| Error::git(format!("opening {}", cache_path.display()), e))?
            }
        };
        let mut me = UpstreamRepo {
            repo,
            url: url.to_string(),
            effective_url,
            cache_path,
        };
        if !me.has_commit(rev) {
            if let Err(e) = me.fetch(url, progress) {
                // A cache entry made just now holds nothing: leave no empty repository behind.
                if fresh {
                    let _ = std::fs::remove_dir_all(&me.cache_path);
                }
                return Err(e);
            }
            // A fresh handle sees new packs and alternates.
            me.repo = git2::Repository::open_bare(&me.cache_path)
                .map_err(|e| Error::git(format!("opening {}", me.cache_path.display()), e))?;
            if !me.has_commit(rev) {
                return Err(Error::input(
                    "pins.toml",
                    None,
                    format!(
                        "commit {rev} is not in {url} (fetched from {}: all branches and tags)",
                        me.effective_url
                    ),
                )
                .with_help("check the rev, or whether the URL points at the right repository"));
            }
        }
        Ok(me)
    }

    /// Whether the clone has commit `rev` (40 hex).
    pub fn has_commit(&self, rev: &str) -> bool {
        git2::Oid::from_str(rev)
            .ok()
            .and_then(|id| self.repo.find_commit(id).ok())
            .is_some()
    }

    /// Fetches every branch and tag of the upstream into the cache.
    pub fn fetch(&self, url: &str, progress: &mut dyn FnMut(FetchProgress)) -> Result<()> {
        if let Some(src) = local_repo(&self.effective_url) {
            return self.borrow_local(&src);
        }
        let mut remote = self
            .repo
            .remote_anonymous(&self.effective_url)
            .map_err(|e| Error::git(format!("using {url}"), e))?;
        let mut cb = git2::RemoteCallbacks::new();
        cb.transfer_progress(|p| {
            progress(FetchProgress::Transfer {
                received_objects: p.received_objects(),
                total_objects: p.total_objects(),
                received_bytes: p.received_bytes(),
            });
            true
        });
        let mut opts = git2::FetchOptions::new();
        opts.remote_callbacks(cb);
        opts.download_tags(git2::AutotagOption::All);
        remote
            .fetch(&["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"], Some(&mut opts), None)
            .map_err(|e| {
                Error::git(
                    format!("fetching {url} (as {}); if this machine is offline, point git's url.<mirror>.insteadOf at a local mirror", self.effective_url),
                    e,
                )
            })
    }

    /// A local upstream is shared, not copied (like `git clone --shared`): the cache borrows its
    /// object store through `objects/info/alternates` and copies its branch and tag refs. This is
    /// instant, and it tolerates mirrors that lack objects only unrelated refs need (libgit2's local
    /// transport walks every ref of the source and fails on any missing object).
    fn borrow_local(&self, src: &git2::Repository) -> Result<()> {
        let objects = src.path().join("objects");
        let alt = self
            .repo
            .path()
            .join("objects")
            .join("info")
            .join("alternates");
        let line = format!("{}\n", objects.display());
        if std::fs::read_to_string(&alt).ok().as_deref() != Some(line.as_str()) {
            std::fs::create_dir_all(alt.parent().expect("has parent")).at(&alt)?;
            std::fs::write(&alt, &line).at(&alt)?;
        }
        // Re-open so the object database sees the alternate.
        let repo = git2::Repository::open_bare(self.repo.path())
            .map_err(|e| Error::git("re-opening the cache", e))?;
        let refs = src
            .references()
            .map_err(|e| Error::git("listing refs of the local upstream", e))?;
        for r in refs.flatten() {
            let (Ok(name), Some(target)) = (r.name(), r.target()) else {
                continue;
            };
            if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
                repo.reference(name, target, true, "overlay: borrow local upstream")
                    .map_err(|e| Error::git(format!("updating {name}"), e))?;
            }
        }
        Ok(())
    }

    /// The libgit2 repository.
    pub fn repo(&self) -> &git2::Repository {
        &self.repo
    }

    /// Resolves a commit-ish (sha, branch, tag) to a full commit id.
    pub fn resolve(&self, rev: &str) -> Result<git2::Oid> {
        let obj = self.repo.revparse_single(rev).map_err(|e| {
            if e.code() == git2::ErrorCode::Ambiguous {
                return self.ambiguous(rev);
            }
            if e.code() == git2::ErrorCode::NotFound {
                return Error::input(
                    &self.url,
                    None,
                    format!("{rev:?}: no such commit, branch or tag"),
                )
                .with_help(format!(
                    "branch and tag names are the upstream's own, as {} names them (such as `main`, not `origin/main`); a commit id needs at least 4 hex digits",
                    self.url
                ));
            }
            Error::git(format!("resolving {rev:?} in {}", self.effective_url), e)
        })?;
        let c = obj
            .peel_to_commit()
            .map_err(|e| Error::git(format!("{rev:?} is not a commit"), e))?;
        Ok(c.id())
    }

    /// An ambiguous abbreviated id: the commits it could mean.
    fn ambiguous(&self, rev: &str) -> Error {
        let prefix = rev.to_ascii_lowercase();
        let mut commits = Vec::new();
        if let Ok(odb) = self.repo.odb() {
            let _ = odb.foreach(|id| {
                if id.to_string().starts_with(&prefix)
                    && let Ok(c) = self.repo.find_commit(*id)
                {
                    commits.push(format!(
                        "{} {}",
                        &id.to_string()[..12],
                        c.summary().ok().flatten().unwrap_or("")
                    ));
                }
                commits.len() < 10
            });
        }
        commits.sort();
        commits.dedup();
        let list = if commits.is_empty() {
            "(no commit among them)".to_string()
        } else {
            commits.join("; ")
        };
        Error::input(
            &self.effective_url,
            None,
            format!("{rev:?} is ambiguous: it abbreviates several objects; commits: {list}"),
        )
        .with_help("give more digits of the commit id")
    }

    /// The whole tree at a commit, as blob references.
    pub fn tree_at(&self, commit: git2::Oid) -> Result<Tree> {
        tree_of_commit(&self.repo, commit)
    }
}

/// The tree object of `commit`.
fn commit_tree(repo: &git2::Repository, commit: git2::Oid) -> Result<git2::Tree<'_>> {
    let c = repo
        .find_commit(commit)
        .map_err(|e| Error::git(format!("reading commit {commit}"), e))?;
    c.tree()
        .map_err(|e| Error::git(format!("reading the tree of {commit}"), e))
}

/// Whether git checkout would write a tree entry of this name. A crafted tree (git mktree accepts
/// anything) may name `..` or `.git`: writing it would leave the materialized directory or plant
/// hooks. git checkout refuses these; so do we.
fn safe_name(name: &str) -> bool {
    !(matches!(name, "" | "." | "..")
        || name.contains(['/', '\0'])
        || crate::patch::is_dot_git(name))
}

fn unsafe_path(repo: &git2::Repository, commit: git2::Oid, path: String) -> Error {
    Error::refused(
        repo.path(),
        None,
        Refusal::UnsafePath {
            commit: commit.to_string(),
            path,
        },
    )
    .with_help(
        "this commit was crafted or is corrupt: pin another commit, or ask the upstream to fix it",
    )
}

/// A tree holding only `paths` of a commit (those that exist), as blob references. A path with an
/// unsafe component is refused as [`tree_of_commit`] refuses it.
pub fn subset_of_commit(
    repo: &git2::Repository,
    commit: git2::Oid,
    paths: &[String],
) -> Result<Tree> {
    let tree = commit_tree(repo, commit)?;
    let mut out = Tree::default();
    for p in paths {
        if !p.split('/').all(safe_name) {
            return Err(unsafe_path(repo, commit, p.clone()));
        }
        if let Ok(e) = tree.get_path(Path::new(p))
            && e.kind() == Some(git2::ObjectType::Blob)
        {
            out.entries.insert(
                p.clone(),
                Entry {
                    mode: e.filemode() as u32,
                    content: Content::Blob(e.id()),
                },
            );
        }
    }
    Ok(out)
}

/// The whole tree of `commit` in any repository, as blob references.
pub fn tree_of_commit(repo: &git2::Repository, commit: git2::Oid) -> Result<Tree> {
    let tree = commit_tree(repo, commit)?;
    let mut out = Tree::default();
    let mut bad = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
        let name = e.name().unwrap_or("");
        if e.name().is_err() || !safe_name(name) {
            bad = Some(format!("{dir}{}", String::from_utf8_lossy(e.name_bytes())));
            return git2::TreeWalkResult::Abort;
        }
        if e.kind() == Some(git2::ObjectType::Blob) {
            let path = format!("{dir}{name}");
            out.entries.insert(
                path,
                Entry {
                    mode: e.filemode() as u32,
                    content: Content::Blob(e.id()),
                },
            );
        }
        git2::TreeWalkResult::Ok
    })
    .or_else(|e| match bad {
        Some(_) => Ok(()),
        None => Err(Error::git("walking the tree", e)),
    })?;
    if let Some(path) = bad {
        return Err(unsafe_path(repo, commit, path));
    }
    Ok(out)
}

impl BlobSource for git2::Repository {
    fn blob(&self, id: git2::Oid) -> Result<Vec<u8>> {
        let blob = self
            .find_blob(id)
            .map_err(|e| Error::git(format!("reading blob {id}"), e))?;
        Ok(blob.content().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit holding `a` and `d/b`.
    fn repo_with_commit(dir: &Path) -> (git2::Repository, git2::Oid) {
        let repo = git2::Repository::init(dir).unwrap();
        let c = commit_one(&repo);
        (repo, c)
    }

    fn commit_one(repo: &git2::Repository) -> git2::Oid {
        let blob = repo.blob(b"x\n").unwrap();
        let mut sub = repo.treebuilder(None).unwrap();
        sub.insert("b", blob, 0o100644).unwrap();
        let sub = sub.write().unwrap();
        let mut top = repo.treebuilder(None).unwrap();
        top.insert("a", blob, 0o100644).unwrap();
        top.insert("d", sub, 0o040000).unwrap();
        let tree = repo.find_tree(top.write().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(None, &sig, &sig, "c", &tree, &[]).unwrap()
    }

    #[test]
    fn a_wait_for_the_cache_lock_is_reported_not_printed() {
        let src = tempfile::tempdir().unwrap();
        let (_repo, c) = repo_with_commit(src.path());
        let url = src.path().to_str().unwrap().to_string();
        let cache = tempfile::tempdir().unwrap();
        let lock = cache
            .path()
            .join("upstreams")
            .join(format!("up-{}.lock", url_key(&rewrite_url(&url).unwrap())));
        let held = lock_exclusive(&lock, &mut || panic!("nobody holds it yet")).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(held);
        });
        let mut events = Vec::new();
        let rev = c.to_string();
        UpstreamRepo::open(cache.path(), "up", &url, &rev, &mut |p| events.push(p)).unwrap();
        release.join().unwrap();
        assert!(
            matches!(&events[..], [FetchProgress::Waiting { cache_path }, ..]
                if cache_path.ends_with(lock.with_extension("git").file_name().unwrap())),
            "{events:?}"
        );
    }

    #[test]
    fn a_subset_refuses_unsafe_paths_as_the_whole_tree_does() {
        let d = tempfile::tempdir().unwrap();
        let (repo, c) = repo_with_commit(d.path());
        let t = subset_of_commit(&repo, c, &["d/b".into(), "gone".into()]).unwrap();
        assert_eq!(t.entries.keys().collect::<Vec<_>>(), ["d/b"]);
        assert_eq!(tree_of_commit(&repo, c).unwrap().entries.len(), 2);
        for bad in ["d/../a", ".git/config", "d/.GIT/x", "./a"] {
            let e = subset_of_commit(&repo, c, &[bad.into()]).unwrap_err();
            assert!(
                matches!(e.refusal(), Some(Refusal::UnsafePath { path, .. }) if path == bad),
                "{bad}: {e}"
            );
        }
    }
}
