//! The patch model: one overlay is one `git format-patch` file (mbox header, message with trailers,
//! `---`, diffstat, unified diffs with git's extended headers, signature).
//!
//! Parsing is strict: hunk line counts must match the body, paths must stay inside the tree, binary
//! patches are refused. The raw text is kept so an overlay that does not change keeps every byte.

use std::path::PathBuf;

mod parse;
mod render;
pub mod trailers;

pub(crate) use parse::parse_file_diffs;
pub use parse::{check_rel_path, is_dot_git, parse_overlay, trailer_paragraph};
pub use render::{RenderFile, render_diff, render_diffstat, render_hunk};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
/// The `Overlay-Kind:` trailer.
pub enum OverlayKind {
    /// Meant to go upstream one day.
    Upstreamable,
    /// Stays in the fork.
    LocalOnly,
}

impl OverlayKind {
    /// The trailer's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OverlayKind::Upstreamable => "upstreamable",
            OverlayKind::LocalOnly => "local-only",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
/// The `Upstream-Status:` trailer.
pub enum UpstreamStatus {
    /// Not sent upstream yet.
    NotSubmitted,
    /// Sent upstream, under review.
    Submitted {
        /// The pull request or mailing-list thread.
        url: String,
    },
    /// Merged upstream.
    Merged {
        /// The upstream commit that carries it.
        sha: String,
    },
}

impl std::fmt::Display for UpstreamStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamStatus::NotSubmitted => f.write_str("not-submitted"),
            UpstreamStatus::Submitted { url } => write!(f, "submitted {url}"),
            UpstreamStatus::Merged { sha } => write!(f, "merged {sha}"),
        }
    }
}

/// `Depends-On: <path>::<symbol>`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dependency {
    /// Upstream path of the file.
    pub path: String,
    /// The definition's name in it.
    pub symbol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
/// The fork's trailers of an overlay.
pub struct Trailers {
    /// `Overlay-Kind:`.
    pub kind: OverlayKind,
    /// `Upstream-Status:`, when present.
    pub status: Option<UpstreamStatus>,
    /// `Depends-On:` lines, in order.
    pub depends_on: Vec<Dependency>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// The kind of one hunk line.
pub enum LineKind {
    /// ` ` in both sides.
    Context,
    /// `-`: only in the old side.
    Remove,
    /// `+`: only in the new side.
    Add,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One line of a hunk.
pub struct Line {
    /// Its kind.
    pub kind: LineKind,
    /// Without the newline; a CRLF file keeps its `\r`.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One `@@` hunk.
pub struct Hunk {
    /// 1-based first line of the old side (0 for an empty side).
    pub old_start: usize,
    /// Lines of the old side.
    pub old_len: usize,
    /// 1-based first line of the new side (0 for an empty side).
    pub new_start: usize,
    /// Lines of the new side.
    pub new_len: usize,
    /// Text after the second `@@` (git's function-name heading), informational only.
    pub heading: String,
    /// The body lines.
    pub lines: Vec<Line>,
    /// `\ No newline at end of file` after the last old-side / new-side line.
    pub old_missing_newline: bool,
    /// `\ No newline at end of file` after the new side.
    pub new_missing_newline: bool,
    /// 1-based line of the `@@` header in the patch file.
    pub patch_line: usize,
}

impl Hunk {
    /// The old side's lines (context and removed).
    pub fn preimage(&self) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .filter(|l| l.kind != LineKind::Add)
            .map(|l| l.text.as_str())
    }
    /// The new side's lines (context and added).
    pub fn postimage(&self) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .filter(|l| l.kind != LineKind::Remove)
            .map(|l| l.text.as_str())
    }
    /// Context lines before the first change.
    pub fn leading_context(&self) -> usize {
        self.lines
            .iter()
            .take_while(|l| l.kind == LineKind::Context)
            .count()
    }
    /// Context lines after the last change.
    pub fn trailing_context(&self) -> usize {
        self.lines
            .iter()
            .rev()
            .take_while(|l| l.kind == LineKind::Context)
            .count()
    }
    /// Same change at the same place: everything but the heading and the patch position.
    pub fn same_as(&self, other: &Hunk) -> bool {
        (
            self.old_start,
            self.old_len,
            self.new_start,
            self.new_len,
            &self.lines,
            self.old_missing_newline,
            self.new_missing_newline,
        ) == (
            other.old_start,
            other.old_len,
            other.new_start,
            other.new_len,
            &other.lines,
            other.old_missing_newline,
            other.new_missing_newline,
        )
    }
}

/// One `diff --git` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// Path before the change; `None` for a new file.
    pub old_path: Option<String>,
    /// Path after the change; `None` for a deleted file.
    pub new_path: Option<String>,
    /// Mode before (`old mode`/`deleted file mode`), when the patch says.
    pub old_mode: Option<u32>,
    /// Mode after (`new mode`/`new file mode`), when the patch says.
    pub new_mode: Option<u32>,
    /// The hunks, in file order.
    pub hunks: Vec<Hunk>,
    /// 1-based line of `diff --git` in the patch file.
    pub patch_line: usize,
}

impl FilePatch {
    /// Whether the diff creates the file.
    pub fn is_new(&self) -> bool {
        self.old_path.is_none()
    }
    /// Whether the diff deletes the file.
    pub fn is_delete(&self) -> bool {
        self.new_path.is_none()
    }
    /// Whether the diff renames the file.
    pub fn is_rename(&self) -> bool {
        matches!((&self.old_path, &self.new_path), (Some(a), Some(b)) if a != b)
    }
    /// The path this section is about (the new one, or the old one for a deletion).
    pub fn path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or("")
    }
}

/// A parsed overlay file.
#[derive(Debug, Clone)]
pub struct Overlay {
    /// File name as listed in the series.
    pub name: String,
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// The file's text, byte for byte.
    pub raw: String,
    /// Everything up to and including the `---` line: mbox header, message, trailers.
    pub prelude: String,
    /// `From:` of the mail header.
    pub author: String,
    /// `Date:` of the mail header.
    pub date: String,
    /// `Subject:` without the `[PATCH n/m]` prefix.
    pub subject: String,
    /// Message body (after the subject), trailers included.
    pub body: String,
    /// The fork's trailers.
    pub trailers: Trailers,
    /// The `diff --git` sections, in order.
    pub files: Vec<FilePatch>,
    /// What follows `-- ` at the end (git's version), if present.
    pub signature: Option<String>,
}

impl Overlay {
    /// The paths this overlay touches: each file's old and new path, in file order (a path on
    /// both sides comes twice; collect into a set for each once).
    pub fn touched_paths(&self) -> impl Iterator<Item = String> + '_ {
        self.files
            .iter()
            .flat_map(|f| [f.old_path.clone(), f.new_path.clone()])
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::error::Result;

    const HEAD: &str = "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nDate: x\nSubject: [PATCH 2/3] Fix it\n\nWhy.\n\nOverlay-Kind: upstreamable\nDepends-On: src/a.c::f\n---\n";
    const DIFF: &str =
        "diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n";

    fn parse(text: &str) -> Result<Overlay> {
        parse_overlay("t.patch", Path::new("t.patch"), text)
    }

    #[track_caller]
    fn refused(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert_eq!(
            e.kind(),
            crate::ErrorKind::Input(crate::InputKind::Patch),
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn parses_header_trailers_and_strips_the_patch_prefix() {
        let o = parse(&format!("{HEAD}{DIFF}-- \n2.47.3\n\n")).unwrap();
        assert_eq!(o.subject, "Fix it");
        assert_eq!(o.trailers.kind, OverlayKind::Upstreamable);
        assert_eq!(
            o.trailers.depends_on,
            vec![Dependency {
                path: "src/a.c".into(),
                symbol: "f".into()
            }]
        );
        assert_eq!(o.signature.as_deref(), Some("2.47.3"));
        assert_eq!(o.prelude, HEAD);
    }

    #[test]
    fn refusals_name_the_line() {
        assert!(
            refused(&format!("Subject: x\n{DIFF}"))
                .starts_with("t.patch:1: not a git format-patch file")
        );
        assert!(
            refused(&HEAD.replace("Date: x\n", "Date: x\nContent-Transfer-Encoding: base64\n"))
                .contains("transfer encoding \"base64\"")
        );
        assert!(refused(HEAD).contains("the patch contains no diff"));
        // A Windows editor's BOM and a CRLF checkout are named, not read as a malformed header.
        let bom = refused(&format!("\u{feff}{HEAD}{DIFF}"));
        assert!(
            bom.starts_with("t.patch:1:") && bom.contains("byte-order mark"),
            "{bom}"
        );
        let crlf = refused(&format!("{HEAD}{DIFF}").replace('\n', "\r\n"));
        assert!(
            crlf.starts_with("t.patch:1:") && crlf.contains("CRLF"),
            "{crlf}"
        );
        // CR inside the content (a patch of a file with CRLF lines) is not a converted file.
        let content_cr = DIFF.replace("-a\n+b\n", "-a\r\n+b\r\n");
        parse(&format!("{HEAD}{content_cr}")).expect("CR in content lines is content");
        assert!(refused(&format!("{HEAD}{DIFF}{DIFF}")).contains("f is patched twice"));
        let copy = "diff --git a/f b/g\nsimilarity index 90%\ncopy from f\ncopy to g\n";
        assert!(
            refused(&format!("{HEAD}{copy}"))
                .starts_with("t.patch:13: copy patches are not supported")
        );
        let renamed_names = DIFF.replace("+++ b/f", "+++ b/other");
        assert!(refused(&format!("{HEAD}{renamed_names}")).contains("inconsistent new file name"));
        let lone = DIFF.replace("+b\n", "+b\n\\ No newline at end of file\n+c\n");
        assert!(
            refused(&format!("{HEAD}{lone}")).starts_with(
                "t.patch:15: hunk header says -1,1 +1,1 but line 19 continues the hunk"
            )
        );
    }

    #[test]
    fn unknown_trailer_keys_are_refused_with_the_closest_known_one() {
        let typo = HEAD.replace("Depends-On:", "Depend-On:");
        let e = parse(&format!("{typo}{DIFF}")).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Input(crate::InputKind::Patch));
        let msg = e.to_string();
        assert!(
            msg.starts_with("t.patch:9: unknown trailer \"Depend-On\" in the trailer paragraph"),
            "{msg}"
        );
        assert!(msg.contains("help: did you mean `Depends-On:`?"), "{msg}");
        let far = HEAD.replace("Depends-On: src/a.c::f", "Performance-Notes: fast");
        let msg = refused(&format!("{far}{DIFF}"));
        assert!(
            msg.starts_with("t.patch:9: unknown trailer") && !msg.contains("did you mean"),
            "{msg}"
        );
        assert!(
            msg.contains("a note of your own belongs in the message above it"),
            "{msg}"
        );
        // The same line in the message body is no trailer, and so no error.
        let body = HEAD.replace("Why.\n", "Why.\nDepend-On: nothing\n");
        parse(&format!("{body}{DIFF}")).unwrap();
    }

    #[test]
    fn the_fork_and_git_trailers_are_accepted() {
        let all = "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\nBase: 0123456789012345678901234567890123456789\nReverts-Upstream: 0123456789012345678901234567890123456789\nReverts-Overlay: 0004-fast-path.patch\nSigned-off-by: A <a@b>\nco-authored-by: B <b@c>\nReviewed-by: C <c@d>\nCc: D <d@e>\nFixes: 0123456789ab (\"x\")\nLink: https://example.com/x\nChange-Id: I0123\n";
        let head = HEAD.replace("Overlay-Kind: upstreamable\nDepends-On: src/a.c::f\n", all);
        parse(&format!("{head}{DIFF}")).unwrap();
        let empty = head.replace("Reverts-Overlay: 0004-fast-path.patch", "Reverts-Overlay: ");
        let msg = refused(&format!("{empty}{DIFF}"));
        assert!(
            msg.starts_with("t.patch:12: Reverts-Overlay: expected the file name"),
            "{msg}"
        );
    }

    #[test]
    fn render_round_trips_hunks() {
        let o = parse(&format!("{HEAD}diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@ fn x\n a\n-b\n\\ No newline at end of file\n+c\n")).unwrap();
        let mut s = String::new();
        render_hunk(&mut s, &o.files[0].hunks[0]);
        assert_eq!(
            s,
            "@@ -1,2 +1,2 @@ fn x\n a\n-b\n\\ No newline at end of file\n+c\n"
        );
    }
}
