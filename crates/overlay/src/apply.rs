//! Exact hunk placement. No fuzz, ever: a hunk's whole pre-image must match. A hunk found away from
//! its recorded line is placed but its offset is reported; a pre-image that matches in several places
//! (and not at the recorded line) is refused as ambiguous.

use crate::patch::{FilePatch, Hunk};

/// A text file split into lines (without '\n'; a CRLF file keeps its '\r').
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    /// The lines, without their line terminator.
    pub lines: Vec<String>,
    /// False when the last line has no newline (an empty file counts as terminated).
    pub final_newline: bool,
}

impl Text {
    /// Splits `s` into lines; an empty string is an empty, terminated file.
    pub fn parse(s: &str) -> Text {
        if s.is_empty() {
            return Text {
                lines: Vec::new(),
                final_newline: true,
            };
        }
        let final_newline = s.ends_with('\n');
        let body = if final_newline { &s[..s.len() - 1] } else { s };
        Text {
            lines: body.split('\n').map(str::to_string).collect(),
            final_newline,
        }
    }

    /// The text again, byte for byte what [`Text::parse`] read.
    pub fn render(&self) -> String {
        let mut s = self.lines.join("\n");
        if self.final_newline && !self.lines.is_empty() {
            s.push('\n');
        }
        s
    }
}

/// Where one hunk landed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// 1-based index of the hunk within its file diff.
    pub hunk: usize,
    /// The line the patch records (1-based, old side).
    pub recorded: usize,
    /// The line it applied at (1-based, old side).
    pub actual: usize,
}

impl Placement {
    /// How far the hunk moved: actual minus recorded line.
    pub fn offset(&self) -> isize {
        self.actual as isize - self.recorded as isize
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// Why a hunk does not apply.
pub enum Failure {
    /// The pre-image matches nowhere. `first_difference`: at the recorded place, the first line that
    /// differs (1-based file line, expected, found).
    NoMatch {
        /// (1-based file line, expected line, found line) where the first difference is.
        first_difference: Option<(usize, String, Option<String>)>,
    },
    /// Not at the recorded line, and at several other lines.
    Ambiguous {
        /// The 1-based lines it matches at.
        candidates: Vec<usize>,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoMatch {
                first_difference: Some((line, want, got)),
            } => match got {
                Some(got) => write!(
                    f,
                    "context does not match: line {line} is {got:?}, the patch expects {want:?}"
                ),
                None => write!(
                    f,
                    "context does not match: the file ends before line {line} ({want:?} expected)"
                ),
            },
            Failure::NoMatch {
                first_difference: None,
            } => {
                write!(f, "context does not match anywhere in the file")
            }
            Failure::Ambiguous { candidates } => {
                let c: Vec<String> = candidates.iter().map(|c| c.to_string()).collect();
                write!(
                    f,
                    "context not found at its recorded line and it matches at several lines ({}); refusing to guess",
                    c.join(", ")
                )
            }
        }
    }
}

/// Old-side 0-based index where a hunk's pre-image starts, as recorded.
fn recorded_index(h: &Hunk) -> usize {
    if h.old_len == 0 {
        h.old_start
    } else {
        h.old_start.saturating_sub(1)
    }
}

fn matches_at(text: &Text, h: &Hunk, pre: &[&str], pos: usize, floor: usize) -> bool {
    if pos < floor || pos + pre.len() > text.lines.len() {
        return false;
    }
    // git: a hunk recorded at line 1 must match at the beginning; one without trailing context
    // must match at the end (it was made against the end of the file).
    if h.old_start <= 1 && pos != 0 {
        return false;
    }
    let at_end = pos + pre.len() == text.lines.len();
    // Like git, this holds for pure insertions too: one without any context placed above other
    // lines would, e.g., drop its "\ No newline at end of file" (found by fuzzing).
    if h.trailing_context() == 0 && !at_end {
        return false;
    }
    if !pre.is_empty()
        && at_end
        && h.old_missing_newline == text.final_newline
        && !text.lines.is_empty()
    {
        return false;
    }
    if h.old_missing_newline && !at_end {
        return false;
    }
    text.lines[pos..pos + pre.len()]
        .iter()
        .zip(pre)
        .all(|(a, b)| a == b)
}

/// Whether the hunk's pre-image sits exactly at its recorded place adjusted by `drift`.
pub fn at_expected(text: &Text, h: &Hunk, floor: usize, drift: isize) -> bool {
    let pre: Vec<&str> = h.preimage().collect();
    let expected = (recorded_index(h) as isize + drift).max(0) as usize;
    matches_at(text, h, &pre, expected, floor)
}

/// Whether the hunk's post-image already sits at its recorded place adjusted by `drift` (0-based
/// start when it does): the change is already there, whatever else matches further down.
pub fn already_applied_at(text: &Text, h: &Hunk, floor: usize, drift: isize) -> Option<usize> {
    let rev = reverse(h);
    let post: Vec<&str> = rev.preimage().collect();
    if post.is_empty() {
        return None;
    }
    let expected = (recorded_index(h) as isize + drift).max(0) as usize;
    matches_at(text, &rev, &post, expected, floor).then_some(expected)
}

/// Where a hunk's pre-image starts in `text` (0-based), searching from `floor`: the recorded place
/// (adjusted by `drift`, the offset of the previous hunk) first, then a unique exact match.
pub fn locate(text: &Text, h: &Hunk, floor: usize, drift: isize) -> Result<usize, Failure> {
    let pre: Vec<&str> = h.preimage().collect();
    let recorded = recorded_index(h);
    let expected = (recorded as isize + drift).max(0) as usize;
    if matches_at(text, h, &pre, expected, floor) {
        return Ok(expected);
    }
    if matches_at(text, h, &pre, recorded, floor) {
        return Ok(recorded);
    }
    if pre.is_empty() {
        // A pure insertion without context has nothing to search for.
        return Err(Failure::NoMatch {
            first_difference: None,
        });
    }
    let found: Vec<usize> = (floor..=text.lines.len().saturating_sub(pre.len()))
        .filter(|&p| matches_at(text, h, &pre, p, floor))
        .collect();
    match found.as_slice() {
        [] => {
            let diff = pre.iter().enumerate().find_map(|(k, want)| {
                let got = text.lines.get(expected + k);
                (got.map(String::as_str) != Some(*want))
                    .then(|| (expected + k + 1, want.to_string(), got.cloned()))
            });
            Err(Failure::NoMatch {
                first_difference: diff,
            })
        }
        [one] => Ok(*one),
        many => Err(Failure::Ambiguous {
            candidates: many.iter().map(|p| p + 1).collect(),
        }),
    }
}

/// The 1-based line a placement reports for a hunk found at 0-based `pos`.
pub fn placement(i: usize, h: &Hunk, pos: usize) -> Placement {
    let one = usize::from(h.old_len > 0);
    Placement {
        hunk: i + 1,
        recorded: recorded_index(h) + one,
        actual: pos + one,
    }
}

/// Builds the text that results from placing `hunks` (in order) at the 0-based positions given.
pub fn splice(text: &Text, hunks: &[(&Hunk, usize)]) -> Text {
    let mut out: Vec<String> = Vec::with_capacity(text.lines.len() + 16);
    let mut cursor = 0usize;
    let mut final_newline = text.final_newline;
    for (h, pos) in hunks {
        out.extend_from_slice(&text.lines[cursor..*pos]);
        out.extend(h.postimage().map(str::to_string));
        cursor = pos + h.preimage().count();
        if cursor == text.lines.len() {
            final_newline = !h.new_missing_newline;
        }
    }
    out.extend_from_slice(&text.lines[cursor..]);
    if out.is_empty() {
        final_newline = true;
    }
    Text {
        lines: out,
        final_newline,
    }
}

/// Applies the hunks of one file diff to `text`.
pub fn apply_hunks(
    text: &Text,
    fp: &FilePatch,
) -> Result<(Text, Vec<Placement>), (usize, Failure)> {
    let mut cursor = 0usize;
    let mut drift: isize = 0;
    let mut placed = Vec::with_capacity(fp.hunks.len());
    let mut placements = Vec::with_capacity(fp.hunks.len());
    for (i, h) in fp.hunks.iter().enumerate() {
        let pos = locate(text, h, cursor, drift).map_err(|f| (i + 1, f))?;
        drift = pos as isize - recorded_index(h) as isize;
        placements.push(placement(i, h, pos));
        placed.push((h, pos));
        cursor = pos + h.preimage().count();
    }
    Ok((splice(text, &placed), placements))
}

/// The hunk that undoes `h` (post-image becomes pre-image).
pub fn reverse(h: &Hunk) -> Hunk {
    use crate::patch::{Line, LineKind};
    Hunk {
        old_start: h.new_start,
        old_len: h.new_len,
        new_start: h.old_start,
        new_len: h.old_len,
        heading: h.heading.clone(),
        lines: h
            .lines
            .iter()
            .map(|l| Line {
                kind: match l.kind {
                    LineKind::Add => LineKind::Remove,
                    LineKind::Remove => LineKind::Add,
                    LineKind::Context => LineKind::Context,
                },
                text: l.text.clone(),
            })
            .collect(),
        old_missing_newline: h.new_missing_newline,
        new_missing_newline: h.old_missing_newline,
        patch_line: h.patch_line,
    }
}

/// 0-based index of the line a hunk is "about": its first changed old line, or for a pure
/// insertion the line just above it. Used to find the enclosing symbol.
pub fn anchor(h: &Hunk, pos: usize) -> usize {
    let lead = h.leading_context();
    let first_change = h
        .lines
        .iter()
        .position(|l| l.kind != crate::patch::LineKind::Context);
    let removes_first =
        first_change.is_some_and(|i| h.lines[i].kind == crate::patch::LineKind::Remove);
    if removes_first {
        pos + lead
    } else {
        (pos + lead).saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::parse_overlay;
    use std::path::Path;

    fn patch(diff: &str) -> FilePatch {
        let raw = format!(
            "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nDate: x\nSubject: [PATCH] t\n\nwhy\n\nOverlay-Kind: local-only\n---\n{diff}"
        );
        parse_overlay("t.patch", Path::new("t.patch"), &raw)
            .unwrap()
            .files
            .remove(0)
    }

    const HUNK: &str = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n";

    fn lines(n: std::ops::Range<u8>) -> String {
        n.map(|i| format!("{}\n", (b'a' + i) as char)).collect()
    }

    #[test]
    fn exact_and_offset() {
        let fp = patch(HUNK);
        let (t, p) = apply_hunks(&Text::parse(&lines(0..8)), &fp).unwrap();
        assert_eq!(t.render(), "a\nb\nc\nD\ne\nf\ng\nh\n");
        assert_eq!(p[0].offset(), 0);
        let (_, p) = apply_hunks(&Text::parse(&format!("x\ny\n{}", lines(0..8))), &fp).unwrap();
        assert_eq!((p[0].actual, p[0].offset()), (5, 2));
    }

    #[test]
    fn one_character_off_is_refused() {
        let fp = patch(HUNK);
        let err = apply_hunks(&Text::parse("a\nb\nc\nd\ne \nf\n"), &fp).unwrap_err();
        assert_eq!(
            err.1.to_string(),
            "context does not match: line 5 is \"e \", the patch expects \"e\""
        );
    }

    #[test]
    fn ambiguous_is_refused() {
        let fp = patch(HUNK);
        let err = apply_hunks(&Text::parse("z\nz\nz\nz\nc\nd\ne\nc\nd\ne\n"), &fp).unwrap_err();
        assert_eq!(
            err.1,
            Failure::Ambiguous {
                candidates: vec![5, 8]
            }
        );
    }

    #[test]
    fn no_newline_at_end() {
        let fp = patch(
            "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n",
        );
        let (t, _) = apply_hunks(&Text::parse("a\nb"), &fp).unwrap();
        assert_eq!(t.render(), "a\nB\n");
        // The same pre-image with a newline present is a mismatch.
        assert!(apply_hunks(&Text::parse("a\nb\n"), &fp).is_err());
    }

    #[test]
    fn crlf_lines_keep_their_cr() {
        let fp = patch("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n");
        let (t, _) = apply_hunks(&Text::parse("a\r\nb\r\n"), &fp).unwrap();
        assert_eq!(t.render(), "a\r\nB\r\n");
        assert!(apply_hunks(&Text::parse("a\nb\n"), &fp).is_err());
    }
}
