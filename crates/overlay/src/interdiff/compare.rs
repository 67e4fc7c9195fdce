//! Two versions of one overlay, compared: what changed in its content (the lines it adds or
//! removes, its files, subject, message and trailers) and what changed only around it (hunk
//! headers, context lines, `index` lines, `From:`/`Date:`, diffstat, signature).

use super::ContentChange;
use crate::patch::{FilePatch, LineKind, Overlay, trailer_paragraph};

/// The changes from `old` to `new`: (context-only changes, content changes).
pub(crate) fn compare(old: &Overlay, new: &Overlay) -> (Vec<String>, Vec<ContentChange>) {
    if old.raw == new.raw {
        return (Vec::new(), Vec::new());
    }
    let mut content = message_changes(old, new);
    content.extend(file_changes(old, new));
    let mut context = context_changes(old, new);
    if context.is_empty() && content.is_empty() {
        context.push("formatting (diffstat, signature or blank lines)".to_string());
    }
    (context, content)
}

/// Subject, message prose and trailers.
fn message_changes(old: &Overlay, new: &Overlay) -> Vec<ContentChange> {
    let mut out = Vec::new();
    if old.subject != new.subject {
        out.push(change(
            "subject",
            None,
            vec![format!("-{}", old.subject), format!("+{}", new.subject)],
        ));
    }
    let (old_prose, old_trailers) = split_body(&old.body);
    let (new_prose, new_trailers) = split_body(&new.body);
    if old_prose != new_prose {
        out.push(change("message", None, interdiff(&old_prose, &new_prose)));
    }
    if old_trailers != new_trailers {
        out.push(change(
            "trailers",
            None,
            interdiff(&old_trailers, &new_trailers),
        ));
    }
    out
}

/// The message body's prose and its trailer lines.
fn split_body(body: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = body.lines().collect();
    let (start, end) = trailer_paragraph(&lines);
    let prose = lines[..start]
        .iter()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>();
    let trim = prose
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(0, |i| i + 1);
    let trailers = lines[start..end].iter().map(|l| l.to_string()).collect();
    (prose[..trim].to_vec(), trailers)
}

/// Files the overlay touches, how (new, deleted, renamed, modes), and the lines it changes in each.
fn file_changes(old: &Overlay, new: &Overlay) -> Vec<ContentChange> {
    let mut out = Vec::new();
    let (old_files, new_files) = (shapes(&old.files), shapes(&new.files));
    if old_files != new_files {
        out.push(change("files", None, interdiff(&old_files, &new_files)));
    }
    for nf in &new.files {
        let Some(of) = old.files.iter().find(|f| f.path() == nf.path()) else {
            continue;
        };
        let (a, b) = (changed_lines(of), changed_lines(nf));
        if a != b {
            out.push(change("lines", Some(nf.path()), interdiff(&a, &b)));
        }
    }
    out
}

/// One line per file: its path and what the overlay does to the file itself.
fn shapes(files: &[FilePatch]) -> Vec<String> {
    files
        .iter()
        .map(|f| {
            let how = match (f.is_new(), f.is_delete(), f.is_rename()) {
                (true, _, _) => "new file".to_string(),
                (_, true, _) => "deleted".to_string(),
                (_, _, true) => format!("renamed from {}", f.old_path.as_deref().unwrap_or("")),
                _ => "modified".to_string(),
            };
            let mode = match (f.old_mode, f.new_mode) {
                (Some(a), Some(b)) if a != b => format!(", mode {a:o} -> {b:o}"),
                (_, Some(b)) => format!(", mode {b:o}"),
                _ => String::new(),
            };
            format!("{} ({how}{mode})", f.path())
        })
        .collect()
}

/// The lines one file's diff adds (`+…`) and removes (`-…`), in order, without their context.
fn changed_lines(f: &FilePatch) -> Vec<String> {
    let mut out = Vec::new();
    for h in &f.hunks {
        for l in &h.lines {
            match l.kind {
                LineKind::Add => out.push(format!("+{}", l.text)),
                LineKind::Remove => out.push(format!("-{}", l.text)),
                LineKind::Context => {}
            }
        }
        if h.new_missing_newline {
            out.push("\\ No newline at end of file (new side)".to_string());
        }
    }
    out
}

/// What changed only around the content.
fn context_changes(old: &Overlay, new: &Overlay) -> Vec<String> {
    let mut out = Vec::new();
    let common = || {
        new.files
            .iter()
            .filter_map(|nf| Some((old.files.iter().find(|f| f.path() == nf.path())?, nf)))
    };
    if common().any(|(a, b)| headers(a) != headers(b)) {
        out.push("hunk headers (line numbers, function headings, how hunks are split)".into());
    }
    if common().any(|(a, b)| context_lines(a) != context_lines(b)) {
        out.push("context lines".into());
    }
    let index = |o: &Overlay| -> Vec<String> {
        o.raw
            .lines()
            .filter(|l| l.starts_with("index "))
            .map(str::to_string)
            .collect()
    };
    if index(old) != index(new) {
        out.push("index lines".into());
    }
    if (&old.author, &old.date) != (&new.author, &new.date) {
        out.push("From:/Date: headers".into());
    }
    out
}

fn headers(f: &FilePatch) -> Vec<(usize, usize, usize, usize, &str)> {
    f.hunks
        .iter()
        .map(|h| {
            (
                h.old_start,
                h.old_len,
                h.new_start,
                h.new_len,
                h.heading.as_str(),
            )
        })
        .collect()
}

fn context_lines(f: &FilePatch) -> Vec<&str> {
    f.hunks
        .iter()
        .flat_map(|h| &h.lines)
        .filter(|l| l.kind == LineKind::Context)
        .map(|l| l.text.as_str())
        .collect()
}

fn change(what: &'static str, file: Option<&str>, lines: Vec<String>) -> ContentChange {
    ContentChange {
        what,
        file: file.map(str::to_string),
        lines,
    }
}

/// `old` against `new` as git diffs them (no context): `-` for an entry only the old version has,
/// `+` for one only the new version has.
pub(crate) fn interdiff(old: &[String], new: &[String]) -> Vec<String> {
    let join = |v: &[String]| v.iter().map(|l| format!("{l}\n")).collect::<String>();
    let Ok(hunks) = crate::diff::hunks(&join(old), &join(new), 0) else {
        // xdiff failed on these texts: every entry of each side, which is still true.
        return old
            .iter()
            .map(|l| format!("-{l}"))
            .chain(new.iter().map(|l| format!("+{l}")))
            .collect();
    };
    let mut out = Vec::new();
    for h in hunks {
        for l in h.lines {
            match l.kind {
                LineKind::Remove => out.push(format!("-{}", l.text)),
                LineKind::Add => out.push(format!("+{}", l.text)),
                LineKind::Context => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const HEAD: &str = "From 0 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nDate: x\nSubject: [PATCH] Fix it\n\nWhy.\n\nOverlay-Kind: upstreamable\n---\n";

    fn ov(text: &str) -> Overlay {
        crate::patch::parse_overlay("t.patch", Path::new("t.patch"), text).unwrap()
    }

    fn diff(start: usize, ctx: &str, add: &str) -> String {
        format!(
            "diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -{start},2 +{start},3 @@\n {ctx}\n+{add}\n x\n"
        )
    }

    #[test]
    fn moved_hunks_and_new_context_are_context_only() {
        let a = ov(&format!("{HEAD}{}", diff(1, "a", "new")));
        let b = ov(&format!("{HEAD}{}", diff(7, "b", "new")).replace("index 1..2", "index 3..4"));
        let (context, content) = compare(&a, &b);
        assert!(content.is_empty(), "{content:?}");
        assert_eq!(context.len(), 3, "{context:?}");
    }

    #[test]
    fn a_changed_added_line_or_trailer_is_content() {
        let a = ov(&format!("{HEAD}{}", diff(1, "a", "new")));
        let b = ov(&format!("{HEAD}{}", diff(1, "a", "newer")));
        let (_, content) = compare(&a, &b);
        assert_eq!(content.len(), 1);
        assert_eq!(
            (content[0].what, content[0].file.as_deref()),
            ("lines", Some("f"))
        );
        assert_eq!(content[0].lines, vec!["-+new", "++newer"]);
        let c = ov(&format!(
            "{}{}",
            HEAD.replace("upstreamable", "local-only"),
            diff(1, "a", "new")
        ));
        let (_, content) = compare(&a, &c);
        assert_eq!(content[0].what, "trailers");
        assert_eq!(
            content[0].lines,
            vec!["-Overlay-Kind: upstreamable", "+Overlay-Kind: local-only"]
        );
    }

    #[test]
    fn identical_bytes_are_no_change() {
        let a = ov(&format!("{HEAD}{}", diff(1, "a", "new")));
        assert_eq!(compare(&a, &a.clone()), (vec![], vec![]));
    }
}
