//! Canonical diffs: what `git diff` / `git format-patch` would write for a change. libgit2's xdiff is
//! git's own, so with git's defaults (3 lines of context, indent heuristic) the hunks match git's.

use std::path::Path;

use crate::apply::Text;
use crate::error::{Error, Result};
use crate::patch::{Hunk, parse_file_diffs};

/// Context lines around each hunk, as `git diff` writes them by default.
pub const CONTEXT: u32 = 3;

/// Hunks turning `old` into `new` with `context` lines of context.
pub fn hunks(old: &str, new: &str, context: u32) -> Result<Vec<Hunk>> {
    if old == new {
        return Ok(Vec::new());
    }
    let mut opts = git2::DiffOptions::new();
    opts.context_lines(context)
        .interhunk_lines(0)
        .indent_heuristic(true)
        .force_text(true);
    let mut patch = git2::Patch::from_buffers(
        old.as_bytes(),
        Some(Path::new("f")),
        new.as_bytes(),
        Some(Path::new("f")),
        Some(&mut opts),
    )
    .map_err(|e| Error::git("diffing", e))?;
    let buf = patch
        .to_buf()
        .map_err(|e| Error::git("printing a diff", e))?;
    let text = String::from_utf8_lossy(&buf);
    let mut files = parse_file_diffs(Path::new("<libgit2 diff>"), &text)?;
    Ok(files.pop().map(|f| f.hunks).unwrap_or_default())
}

/// Like [`hunks`] on already-split texts.
pub fn text_hunks(old: &Text, new: &Text, context: u32) -> Result<Vec<Hunk>> {
    hunks(&old.render(), &new.render(), context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_git_shape() {
        let h = hunks("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\ne\nf\ng\n", 3).unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(
            (h[0].old_start, h[0].old_len, h[0].new_start, h[0].new_len),
            (1, 7, 1, 7)
        );
        let h = hunks("a\nb", "a\nc", 3).unwrap();
        assert!(h[0].old_missing_newline && h[0].new_missing_newline);
    }
}
