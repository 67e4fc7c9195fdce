//! An in-memory file tree (path -> mode + content) and applying overlays to it. Unchanged files stay
//! references to upstream blobs, so a tree of thousands of files costs almost nothing until read.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apply::{Placement, Text, apply_hunks};
use crate::error::{Error, Result};
use crate::patch::{FilePatch, Overlay};

/// A regular file.
pub const MODE_FILE: u32 = 0o100644;
/// An executable file.
pub const MODE_EXEC: u32 = 0o100755;
/// A symbolic link (its content is the target).
pub const MODE_LINK: u32 = 0o120000;

const LINK_HELP: &str = "patch the file at its real path inside the tree, or drop this file from the overlay; a symlink is never followed";

#[derive(Debug, Clone, PartialEq, Eq)]
/// A file's content: a blob in the upstream cache, or bytes an overlay produced.
pub enum Content {
    /// A blob read through a [`BlobSource`].
    Blob(git2::Oid),
    /// Bytes in memory.
    Bytes(Arc<[u8]>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One file of a [`Tree`].
pub struct Entry {
    /// git's file mode ([`MODE_FILE`], [`MODE_EXEC`], [`MODE_LINK`]).
    pub mode: u32,
    /// Its content.
    pub content: Content,
}

/// Reads blob contents by id (the upstream cache repository).
pub trait BlobSource {
    /// The content of blob `id`.
    fn blob(&self, id: git2::Oid) -> Result<Vec<u8>>;
}

/// A [`BlobSource`] that reads each blob from `src` once: a scan that applies the series at many
/// commits reads the same blobs again and again (each read inflates the object and, in libgit2,
/// hashes it again to verify it).
pub struct CachedBlobs<'a> {
    src: &'a dyn BlobSource,
    blobs: std::cell::RefCell<std::collections::HashMap<git2::Oid, Arc<[u8]>>>,
}

impl<'a> CachedBlobs<'a> {
    /// Reads through to `src`, once per blob.
    pub fn new(src: &'a dyn BlobSource) -> CachedBlobs<'a> {
        CachedBlobs {
            src,
            blobs: Default::default(),
        }
    }
}

impl BlobSource for CachedBlobs<'_> {
    fn blob(&self, id: git2::Oid) -> Result<Vec<u8>> {
        if let Some(b) = self.blobs.borrow().get(&id) {
            return Ok(b.to_vec());
        }
        let b = self.src.blob(id)?;
        self.blobs.borrow_mut().insert(id, b.as_slice().into());
        Ok(b)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
/// A tree in memory: path (`/`-separated) to file.
pub struct Tree {
    /// Every file, by path.
    pub entries: BTreeMap<String, Entry>,
}

/// What applying one overlay did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OverlayOutcome {
    /// The overlay's file name.
    pub overlay: String,
    /// Per file it patched.
    pub files: Vec<FileOutcome>,
}

#[derive(Debug, Clone, serde::Serialize)]
/// Where each hunk of one file landed.
pub struct FileOutcome {
    /// The file.
    pub path: String,
    /// One per hunk.
    pub placements: Vec<Placement>,
}

impl OverlayOutcome {
    /// The hunks that did not land at their recorded line, with their file.
    pub fn offsets(&self) -> impl Iterator<Item = (&str, &Placement)> {
        self.files
            .iter()
            .flat_map(|f| f.placements.iter().map(move |p| (f.path.as_str(), p)))
            .filter(|(_, p)| p.offset() != 0)
    }
}

impl Tree {
    /// The content of `path` (`None` when absent), read through `src` for upstream blobs.
    pub fn bytes(&self, path: &str, src: &dyn BlobSource) -> Result<Option<Vec<u8>>> {
        match self.entries.get(path) {
            None => Ok(None),
            Some(Entry {
                content: Content::Bytes(b),
                ..
            }) => Ok(Some(b.to_vec())),
            Some(Entry {
                content: Content::Blob(id),
                ..
            }) => src.blob(*id).map(Some),
        }
    }

    /// Git's blob id of a file's content.
    pub fn blob_id(&self, path: &str) -> Option<git2::Oid> {
        self.entries.get(path).map(|e| match &e.content {
            Content::Blob(id) => *id,
            Content::Bytes(b) => blob_id(b),
        })
    }

    fn text(&self, ov: &Overlay, fp: &FilePatch, path: &str, src: &dyn BlobSource) -> Result<Text> {
        let bytes = self.bytes(path, src)?.unwrap_or_default();
        let s = String::from_utf8(bytes).map_err(|_| {
            Error::input(
                &ov.path,
                Some(fp.patch_line),
                format!("{path} is not UTF-8 text in the tree; text patches only"),
            )
        })?;
        Ok(Text::parse(&s))
    }

    /// Refuses paths that would reach through a symlink or collide with a directory.
    /// A link's target may lie outside the tree, so writing through it could change anything.
    fn check_path(&self, ov: &Overlay, fp: &FilePatch, path: &str) -> Result<()> {
        let mut prefix = String::new();
        for comp in path.split('/') {
            if !prefix.is_empty() {
                if let Some(e) = self.entries.get(&prefix)
                    && e.mode == MODE_LINK
                {
                    return Err(Error::input(
                        &ov.path,
                        Some(fp.patch_line),
                        format!("{path} goes through the symlink {prefix}; refused"),
                    )
                    .with_help(LINK_HELP));
                }
                prefix.push('/');
            }
            prefix.push_str(comp);
        }
        if self.entries.get(path).is_some_and(|e| e.mode == MODE_LINK) {
            return Err(Error::input(
                &ov.path,
                Some(fp.patch_line),
                format!("{path} is a symlink; overlays patch regular files only"),
            )
            .with_help(LINK_HELP));
        }
        let dir = format!("{path}/");
        if self
            .entries
            .range(dir.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&dir))
        {
            return Err(Error::input(
                &ov.path,
                Some(fp.patch_line),
                format!("{path} is a directory in the tree"),
            ));
        }
        Ok(())
    }

    /// Applies one overlay (all its files) or changes nothing.
    pub fn apply_overlay(&mut self, ov: &Overlay, src: &dyn BlobSource) -> Result<OverlayOutcome> {
        let mut staged = self.clone();
        let mut files = Vec::new();
        for fp in &ov.files {
            let old = fp.old_path.as_deref();
            let new = fp.new_path.as_deref();
            for p in [old, new].into_iter().flatten() {
                staged.check_path(ov, fp, p)?;
            }
            let fail = |hunk: usize, reason: String| Error::Apply {
                overlay: ov.path.clone(),
                file: fp.path().to_string(),
                hunk,
                patch_line: fp
                    .hunks
                    .get(hunk.saturating_sub(1))
                    .map_or(fp.patch_line, |h| h.patch_line),
                reason,
            };
            let old_entry = match old {
                Some(p) => Some(
                    staged
                        .entries
                        .get(p)
                        .cloned()
                        .ok_or_else(|| fail(0, format!("{p} does not exist in the tree")))?,
                ),
                None => None,
            };
            if let Some(n) = new
                && old != Some(n)
                && staged.entries.contains_key(n)
            {
                return Err(fail(0, format!("{n} already exists in the tree")));
            }
            let text = match old {
                Some(p) => staged.text(ov, fp, p, src)?,
                None => Text::parse(""),
            };
            let (result, placements) =
                apply_hunks(&text, fp).map_err(|(h, why)| fail(h, why.to_string()))?;
            if let Some(p) = old {
                staged.entries.remove(p);
            }
            match new {
                None => {
                    if !result.lines.is_empty() {
                        return Err(fail(
                            0,
                            "the deletion does not remove the whole file".into(),
                        ));
                    }
                }
                Some(n) => {
                    let mode = fp
                        .new_mode
                        .or(old_entry.as_ref().map(|e| e.mode))
                        .unwrap_or(MODE_FILE);
                    let content = if fp.hunks.is_empty() {
                        old_entry
                            .map(|e| e.content)
                            .unwrap_or(Content::Bytes(Arc::from(&b""[..])))
                    } else {
                        Content::Bytes(Arc::from(result.render().into_bytes()))
                    };
                    staged
                        .entries
                        .insert(n.to_string(), Entry { mode, content });
                }
            }
            files.push(FileOutcome {
                path: fp.path().to_string(),
                placements,
            });
        }
        *self = staged;
        Ok(OverlayOutcome {
            overlay: ov.name.clone(),
            files,
        })
    }
}

/// git's blob id of `bytes` (what `git hash-object` prints).
pub fn blob_id(bytes: &[u8]) -> git2::Oid {
    git2::Oid::hash_object(git2::ObjectType::Blob, bytes).expect("hashing in memory cannot fail")
}
