//! The strict parser: one `git format-patch` file into an [`Overlay`].

use std::path::Path;

use super::render::quote_path;
use super::*;
use crate::error::{Error, Result};
use crate::help::{Help, NextStep};

struct Cursor<'a> {
    path: &'a Path,
    lines: Vec<&'a str>,
    /// Whether the line at the same index ended with '\n'.
    terminated: Vec<bool>,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let mut lines = Vec::new();
        let mut terminated = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find('\n') {
                Some(i) => {
                    lines.push(&rest[..i]);
                    terminated.push(true);
                    rest = &rest[i + 1..];
                }
                None => {
                    lines.push(rest);
                    terminated.push(false);
                    rest = "";
                }
            }
        }
        Cursor {
            path,
            lines,
            terminated,
            pos: 0,
        }
    }
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.pos).copied()
    }
    fn next(&mut self) -> Option<&'a str> {
        let l = self.peek();
        if l.is_some() {
            self.pos += 1;
        }
        l
    }
    /// 1-based number of the line `peek` returns.
    fn line_no(&self) -> usize {
        self.pos + 1
    }
    fn err(&self, line: usize, msg: impl Into<String>) -> Error {
        Error::input(self.path, Some(line), msg).of(crate::error::InputKind::Patch)
    }
}

/// An editor's byte-order mark or a checkout's CRLF conversion, named as such: git writes
/// format-patch files in UTF-8 without a BOM and with LF after its own lines (a patch of a file
/// with CRLF lines keeps their CR inside the content, never on the `From` line).
fn refuse_converted(c: &Cursor<'_>, raw: &str) -> Result<()> {
    if raw.starts_with('\u{feff}') {
        return Err(c
            .err(
                1,
                "the file starts with a UTF-8 byte-order mark (BOM), which git never writes",
            )
            .with_help(
                "an editor added it: save the file as UTF-8 without a BOM, or remove the first \
                 three bytes (sed -i '1s/^\\xEF\\xBB\\xBF//' FILE)",
            ));
    }
    if c.peek().is_some_and(|l| l.ends_with('\r')) {
        return Err(c
            .err(
                1,
                "the file has CRLF line endings; git writes overlays with LF",
            )
            .with_help(
                "a checkout with core.autocrlf=true or an editor converted it (this repository's \
                 .gitattributes marks overlays/** -text so git leaves them alone): check the \
                 file out again (git checkout -- FILE) or convert it back (sed -i 's/\\r$//' FILE)",
            ));
    }
    Ok(())
}

/// Parses one overlay file. `name` is its series entry, `path` where it was read from.
pub fn parse_overlay(name: &str, path: &Path, raw: &str) -> Result<Overlay> {
    let mut c = Cursor::new(path, raw);
    refuse_converted(&c, raw)?;
    expect_from_line(&mut c)?;
    let headers = read_headers(&mut c)?;
    let header = |k: &str| headers.iter().find(|h| h.0 == k);
    let author = header("from")
        .map(|h| h.1.clone())
        .ok_or_else(|| c.err(2, "missing \"From:\" header"))?;
    let date = header("date").map(|h| h.1.clone()).unwrap_or_default();
    let subject = header("subject")
        .map(|h| strip_patch_prefix(&h.1))
        .ok_or_else(|| c.err(2, "missing \"Subject:\" header"))?;
    let (body_start, body_lines) = read_message(&mut c)?;
    let prelude_end: usize = c.lines[..c.pos].iter().map(|l| l.len() + 1).sum();
    let prelude = raw[..prelude_end.min(raw.len())].to_string();
    let trailers = parse_trailers(&c, body_start, &body_lines)?;
    let body = body_lines.join("\n");
    let (files, signature) = read_files(&mut c)?;
    Ok(Overlay {
        name: name.to_string(),
        path: path.to_path_buf(),
        raw: raw.to_string(),
        prelude,
        author,
        date,
        subject,
        body,
        trailers,
        files,
        signature,
    })
}

/// The mbox `From <sha> <date>` line git format-patch starts with.
fn expect_from_line(c: &mut Cursor) -> Result<()> {
    match c.peek() {
        Some(l) if l.starts_with("From ") => {
            c.next();
            Ok(())
        }
        _ => Err(c
            .err(
                1,
                "not a git format-patch file: expected a first line \"From <sha> <date>\"",
            )
            .with_help(
                Help::new("write overlays with `git format-patch` or ")
                    .step(NextStep::plain("refresh")),
            )),
    }
}

/// The mail headers up to the empty line, with RFC 2822 continuation lines: (lower-case key,
/// value, line); an encoding other than 8bit/7bit is refused.
fn read_headers(c: &mut Cursor) -> Result<Vec<(String, String, usize)>> {
    let mut headers: Vec<(String, String, usize)> = Vec::new();
    loop {
        let n = c.line_no();
        let Some(line) = c.next() else {
            return Err(c.err(n, "truncated patch: the mail header never ends"));
        };
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            match headers.last_mut() {
                Some(h) => {
                    h.1.push(' ');
                    h.1.push_str(line.trim());
                }
                None => return Err(c.err(n, "header continuation line without a header")),
            }
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            return Err(c.err(n, format!("malformed mail header line {line:?}")));
        };
        headers.push((k.to_ascii_lowercase(), v.trim().to_string(), n));
    }
    for (k, v, n) in &headers {
        if k == "content-transfer-encoding"
            && !matches!(v.to_ascii_lowercase().as_str(), "8bit" | "7bit")
        {
            return Err(c.err(
                *n,
                format!("content transfer encoding {v:?} is not supported; use 8bit"),
            ));
        }
    }
    Ok(headers)
}

/// The message up to the first `---` line: where it starts, and its lines.
fn read_message<'a>(c: &mut Cursor<'a>) -> Result<(usize, Vec<&'a str>)> {
    let body_start = c.line_no();
    let mut body_lines = Vec::new();
    loop {
        let Some(line) = c.next() else {
            return Err(c.err(
                body_start,
                "truncated patch: no \"---\" line separates the message from the diff",
            ));
        };
        if line == "---" {
            break;
        }
        body_lines.push(line);
    }
    Ok((body_start, body_lines))
}

/// After the diffstat: every file's diff and the signature; an error when there is none, when a
/// file is patched twice, or on stray text.
fn read_files(c: &mut Cursor) -> Result<(Vec<FilePatch>, Option<String>)> {
    // Diffstat: skip to the first "diff --git".
    while let Some(l) = c.peek() {
        if l.starts_with("diff --git ") {
            break;
        }
        c.next();
    }
    let mut files = Vec::new();
    let mut signature = None;
    while let Some(l) = c.peek() {
        if l.starts_with("diff --git ") {
            files.push(parse_file(c)?);
        } else if l == "-- " {
            c.next();
            signature = c.next().map(str::to_string);
            while let Some(rest) = c.next() {
                if !rest.is_empty() {
                    return Err(c.err(c.pos, "unexpected text after the signature"));
                }
            }
        } else if l.is_empty() {
            c.next();
        } else {
            return Err(c.err(
                c.line_no(),
                format!("unexpected line between file diffs: {l:?}"),
            ));
        }
    }
    if files.is_empty() {
        return Err(c
            .err(
                c.line_no().min(c.lines.len().max(1)),
                "the patch contains no diff",
            )
            .with_help("an overlay must change something; `git am` refuses empty patches"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in &files {
        if !seen.insert(f.path().to_string()) {
            return Err(c.err(
                f.patch_line,
                format!("{} is patched twice in one overlay", f.path()),
            ));
        }
    }
    Ok((files, signature))
}

/// "[PATCH 2/3] Fix x" -> "Fix x", as `git am` does.
fn strip_patch_prefix(s: &str) -> String {
    let t = s.trim_start();
    if t.starts_with('[')
        && let Some(end) = t.find(']')
        && t[..end].contains("PATCH")
    {
        return t[end + 1..].trim_start().to_string();
    }
    t.to_string()
}

fn is_trailer_line(l: &str) -> bool {
    match l.split_once(": ") {
        Some((k, _)) => !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
        None => false,
    }
}

/// Where the trailers are in a message body's lines: the last paragraph, every line "Key: value"
/// (`start..end`; empty when the last paragraph is prose).
pub fn trailer_paragraph(body: &[&str]) -> (usize, usize) {
    let end = body
        .iter()
        .rposition(|l| !l.trim().is_empty())
        .map_or(0, |i| i + 1);
    let start = body[..end]
        .iter()
        .rposition(|l| l.trim().is_empty())
        .map_or(0, |i| i + 1);
    let para = &body[start..end];
    if !para.is_empty() && para.iter().all(|l| is_trailer_line(l)) {
        (start, end)
    } else {
        (end, end)
    }
}

fn parse_trailers(c: &Cursor, body_start: usize, body: &[&str]) -> Result<Trailers> {
    let (start, end) = trailer_paragraph(body);
    let para = &body[start..end];
    let mut kind = None;
    let mut status = None;
    let mut depends_on = Vec::new();
    for (i, l) in para.iter().enumerate() {
        let n = body_start + start + i;
        let (k, v) = l.split_once(": ").expect("checked by is_trailer_line");
        let v = v.trim();
        match k.to_ascii_lowercase().as_str() {
            "overlay-kind" => {
                if kind.is_some() {
                    return Err(c.err(n, "Overlay-Kind is given twice"));
                }
                kind = Some(match v {
                    "upstreamable" => OverlayKind::Upstreamable,
                    "local-only" => OverlayKind::LocalOnly,
                    _ => {
                        return Err(c.err(n, format!("Overlay-Kind: expected \"upstreamable\" or \"local-only\", found {v:?}")));
                    }
                });
            }
            "upstream-status" => {
                let mut words = v.split_whitespace();
                let parsed = match (words.next(), words.next(), words.next()) {
                    (Some("not-submitted"), None, _) => Some(UpstreamStatus::NotSubmitted),
                    (Some("submitted"), Some(url), None) => Some(UpstreamStatus::Submitted {
                        url: url.to_string(),
                    }),
                    (Some("merged"), Some(sha), None)
                        if sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit()) =>
                    {
                        Some(UpstreamStatus::Merged {
                            sha: sha.to_string(),
                        })
                    }
                    _ => None,
                };
                status = Some(parsed.ok_or_else(|| {
                    c.err(n, format!("Upstream-Status: expected \"not-submitted\", \"submitted <url>\" or \"merged <sha>\", found {v:?}"))
                })?);
            }
            "depends-on" => {
                let dep = v.split_once("::").and_then(|(p, s)| {
                    let ok = !p.is_empty()
                        && !s.is_empty()
                        && !p.contains(char::is_whitespace)
                        && !s.contains(char::is_whitespace)
                        && check_rel_path(p).is_ok();
                    ok.then(|| Dependency {
                        path: p.to_string(),
                        symbol: s.to_string(),
                    })
                });
                depends_on.push(dep.ok_or_else(|| {
                    c.err(n, format!("Depends-On: expected \"<path>::<symbol>\" with a relative path, found {v:?}"))
                })?);
            }
            "reverts-overlay" if v.is_empty() => {
                return Err(c
                    .err(n, "Reverts-Overlay: expected the file name of an earlier overlay, found nothing")
                    .with_help("name the overlay whose lines this one drops, e.g. \"Reverts-Overlay: 0004-fast-path.patch\""));
            }
            key if !super::trailers::is_known(key) => {
                return Err(c
                    .err(n, format!("unknown trailer {k:?} in the trailer paragraph"))
                    .with_help(super::trailers::unknown_help(k)));
            }
            _ => {}
        }
    }
    let kind = kind.ok_or_else(|| {
        c.err(body_start, "missing \"Overlay-Kind:\" trailer (required)")
            .with_help("end the message with a trailer paragraph, e.g. \"Overlay-Kind: upstreamable\" or \"Overlay-Kind: local-only\"")
    })?;
    Ok(Trailers {
        kind,
        status,
        depends_on,
    })
}

/// Code points HFS+ ignores in file names, so `.g\u{200c}it` is `.git` on a Mac (git's protectHFS).
const HFS_IGNORABLE: &[char] = &[
    '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
    '\u{202e}', '\u{206a}', '\u{206b}', '\u{206c}', '\u{206d}', '\u{206e}', '\u{206f}', '\u{feff}',
];

/// A path component that some file system resolves to `.git`: any case, trailing dots or spaces
/// (NTFS), the NTFS short name `git~1`, HFS+'s ignorable code points. git's own checks
/// (core.protectNTFS, core.protectHFS) refuse the same names, so `git am` would refuse them too.
pub fn is_dot_git(c: &str) -> bool {
    let folded: String = c.chars().filter(|ch| !HFS_IGNORABLE.contains(ch)).collect();
    folded
        .trim_end_matches(['.', ' '])
        .eq_ignore_ascii_case(".git")
        || c.eq_ignore_ascii_case("git~1")
}

/// The advice for a path a patch may not name.
fn bad_path(c: &Cursor, line: usize, msg: String) -> Error {
    c.err(line, msg).with_help(
        "overlays change files inside the upstream tree only: a relative, normalized path, no `..`, nothing in `.git`; regenerate the overlay with `git format-patch`",
    )
}

/// A path from a patch must stay inside the tree: relative, no `..`, not inside `.git`.
pub fn check_rel_path(p: &str) -> std::result::Result<(), String> {
    if p.is_empty() {
        return Err("empty path".into());
    }
    if p.starts_with('/') || p.starts_with('\\') || (p.len() > 1 && p.as_bytes()[1] == b':') {
        return Err(format!("absolute path {p:?} leaves the tree"));
    }
    for comp in p.split('/') {
        match comp {
            "" | "." => return Err(format!("path {p:?} is not normalized")),
            ".." => return Err(format!("path {p:?} leaves the tree through \"..\"")),
            c if is_dot_git(c) => {
                return Err(format!("path {p:?} is inside .git"));
            }
            c if c.contains('\\') || c.contains('\0') => {
                return Err(format!("path {p:?} has a backslash or NUL"));
            }
            _ => {}
        }
    }
    Ok(())
}

fn unquote(s: &str) -> Option<String> {
    // git quotes paths with unusual bytes C-style: "a/f\303\251 x".
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = Vec::new();
    let mut it = inner.bytes().peekable();
    while let Some(b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match it.next()? {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'"' => out.push(b'"'),
            b'\\' => out.push(b'\\'),
            d @ b'0'..=b'7' => {
                let mut v = (d - b'0') as u32;
                for _ in 0..2 {
                    let d = *it.peek()?;
                    if !(b'0'..=b'7').contains(&d) {
                        return None;
                    }
                    it.next();
                    v = v * 8 + (d - b'0') as u32;
                }
                out.push(v as u8);
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// Index in `quoted` (the text after an opening quote) of the quote that closes it.
fn closing_quote(quoted: &str) -> Option<usize> {
    let b = quoted.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn parse_mode(c: &Cursor, n: usize, v: &str) -> Result<u32> {
    u32::from_str_radix(v.trim(), 8).map_err(|_| c.err(n, format!("bad file mode {v:?}")))
}

/// One `diff --git` section: header line, extended headers, hunks. Every check is here or in the
/// helpers it calls, in this order: paths of the `diff --git` line, extended headers, modes, the
/// names agreed, hunks.
fn parse_file(c: &mut Cursor) -> Result<FilePatch> {
    let patch_line = c.line_no();
    let header = c.next().expect("peeked");
    let mut fp = FilePatch {
        old_path: None,
        new_path: None,
        old_mode: None,
        new_mode: None,
        hunks: Vec::new(),
        patch_line,
    };
    let (git_old, git_new) = git_line_paths(&header["diff --git ".len()..]);
    if git_old.is_none() || git_new.is_none() {
        return Err(c.err(patch_line, format!("cannot read paths from {header:?}")));
    }
    let h = parse_ext_headers(c, &mut fp)?;
    check_mode_change(c, &fp, &h, patch_line)?;
    resolve_paths(c, header, &mut fp, &h, (git_old, git_new))?;
    parse_hunks(c, &mut fp)?;
    if fp.hunks.is_empty() && h.minus.is_some() {
        return Err(c.err(patch_line, "a file diff with ---/+++ lines but no hunk"));
    }
    if fp.hunks.is_empty()
        && !h.is_new
        && !h.is_delete
        && !fp.is_rename()
        && fp.old_mode == fp.new_mode
    {
        return Err(c.err(patch_line, "a file diff that changes nothing"));
    }
    Ok(fp)
}

/// Paths from "diff --git a/X b/Y" (given without "diff --git "), only when they are unambiguous;
/// ---/+++ and rename lines win later.
fn git_line_paths(rest: &str) -> (Option<String>, Option<String>) {
    let (mut git_old, mut git_new) = (None, None);
    if let Some(quoted) = rest.strip_prefix('"') {
        // The closing quote is the first unescaped one: a name may hold `\" ` (found by fuzzing).
        if let Some(end) = closing_quote(quoted)
            .map(|i| i + 2)
            .filter(|&e| rest[e..].starts_with(' '))
        {
            git_old = unquote(&rest[..end]).and_then(|p| p.strip_prefix("a/").map(str::to_string));
            git_new = unquote(rest[end..].trim_start())
                .or_else(|| Some(rest[end..].trim_start().to_string()))
                .and_then(|p| p.strip_prefix("b/").map(str::to_string));
        }
    } else if let Some(a) = rest.strip_prefix("a/") {
        // Unquoted: "a/P b/P" for the same P when not renamed.
        let half = (a.len().saturating_sub(2)) / 2;
        if a.len() >= 3
            && a.is_char_boundary(half)
            && a[half..].starts_with(" b/")
            && a[..half] == a[half + 3..]
        {
            git_old = Some(a[..half].to_string());
            git_new = Some(a[..half].to_string());
        } else if let Some(i) = a.find(" \"b/")
            && let Some(b) = unquote(&a[i + 1..])
        {
            // git quotes each name on its own: a/plain "b/with\022control" (found by fuzzing).
            git_old = Some(a[..i].to_string());
            git_new = b.strip_prefix("b/").map(str::to_string);
        } else if let Some(i) = a.find(" b/") {
            git_old = Some(a[..i].to_string());
            git_new = Some(a[i + 3..].to_string());
        }
    }
    (git_old, git_new)
}

/// What a file diff's extended headers and ---/+++ lines said (modes go straight into the patch).
#[derive(Default)]
struct Headers {
    is_new: bool,
    is_delete: bool,
    /// `--- ` seen: `Some(None)` for /dev/null.
    minus: Option<Option<String>>,
    /// `+++ ` seen: `Some(None)` for /dev/null.
    plus: Option<Option<String>>,
    rename_from: Option<String>,
    rename_to: Option<String>,
}

/// The extended headers up to the `+++` line (or the first hunk, or the next file).
fn parse_ext_headers(c: &mut Cursor, fp: &mut FilePatch) -> Result<Headers> {
    let mut h = Headers::default();
    while let Some(l) = c.peek() {
        let n = c.line_no();
        if l.starts_with("diff --git ") || l.starts_with("@@ ") || l == "-- " {
            break;
        }
        c.next();
        if let Some(v) = l.strip_prefix("old mode ") {
            fp.old_mode = Some(parse_mode(c, n, v)?);
        } else if let Some(v) = l.strip_prefix("new mode ") {
            fp.new_mode = Some(parse_mode(c, n, v)?);
        } else if let Some(v) = l.strip_prefix("new file mode ") {
            fp.new_mode = Some(parse_mode(c, n, v)?);
            h.is_new = true;
        } else if let Some(v) = l.strip_prefix("deleted file mode ") {
            fp.old_mode = Some(parse_mode(c, n, v)?);
            h.is_delete = true;
        } else if let Some(v) = l.strip_prefix("rename from ") {
            h.rename_from = Some(unquote(v).unwrap_or_else(|| v.to_string()));
        } else if let Some(v) = l.strip_prefix("rename to ") {
            h.rename_to = Some(unquote(v).unwrap_or_else(|| v.to_string()));
        } else if l.starts_with("copy from ") || l.starts_with("copy to ") {
            return Err(c
                .err(n, "copy patches are not supported")
                .with_help("regenerate the overlay without -C (copies become new files)"));
        } else if l.starts_with("similarity index ")
            || l.starts_with("dissimilarity index ")
            || l.starts_with("index ")
        {
        } else if l.starts_with("GIT binary patch")
            || (l.starts_with("Binary files ") && l.ends_with(" differ"))
        {
            return Err(c
                .err(n, "binary patches are not supported")
                .with_help("overlays carry text changes only; keep binary files out of overlays"));
        } else if let Some(v) = l.strip_prefix("--- ") {
            h.minus = Some(side_path(c, n, v, "a/")?);
        } else if let Some(v) = l.strip_prefix("+++ ") {
            h.plus = Some(side_path(c, n, v, "b/")?);
            break;
        } else {
            return Err(c.err(
                n,
                format!("unexpected line in the header of a file diff: {l:?}"),
            ));
        }
    }
    Ok(h)
}

/// git writes a mode change as both lines with different modes. Half of one, or a "change" to
/// the same mode, would be lost when the overlay is rendered again (found by fuzzing).
fn check_mode_change(c: &Cursor, fp: &FilePatch, h: &Headers, patch_line: usize) -> Result<()> {
    if h.is_new || h.is_delete {
        return Ok(());
    }
    match (fp.old_mode, fp.new_mode) {
        (Some(_), None) | (None, Some(_)) => Err(c.err(
            patch_line,
            "a mode change needs both an \"old mode\" and a \"new mode\" line",
        )),
        (Some(o), Some(n)) if o == n => Err(c.err(
            patch_line,
            format!("\"old mode\" and \"new mode\" are both {o:o}: not a change"),
        )),
        _ => Ok(()),
    }
}

/// Settles the file's old and new paths from the `diff --git` line (`git`), the ---/+++ lines and
/// the rename lines, refusing names that disagree or leave the tree.
fn resolve_paths(
    c: &Cursor,
    header: &str,
    fp: &mut FilePatch,
    h: &Headers,
    git: (Option<String>, Option<String>),
) -> Result<()> {
    let patch_line = fp.patch_line;
    let (mut git_old, mut git_new) = git;
    let (minus, plus) = (h.minus.clone().flatten(), h.plus.clone().flatten());
    // An unquoted name may itself hold " b/", so the diff --git line splits in several places; the
    // ---/+++ or rename names pick the split when they spell the line exactly (found by fuzzing).
    let side_old = h.rename_from.clone().or(minus.clone());
    let side_new = h.rename_to.clone().or(plus.clone());
    if let Some(o) = side_old.clone().or(side_new.clone())
        && let Some(n) = side_new.or(side_old)
        && header
            == format!(
                "diff --git {} {}",
                quote_path("a/", &o),
                quote_path("b/", &n)
            )
    {
        git_old = Some(o);
        git_new = Some(n);
    }
    // Checked once the split is known: a name holding " b/" is not a bad path (found by fuzzing).
    for p in [&git_old, &git_new].into_iter().flatten() {
        check_rel_path(p).map_err(|m| bad_path(c, patch_line, m))?;
    }
    // Like git apply: the ---/+++ names must agree with the diff --git line.
    for (side, name, git) in [("old", &minus, &git_old), ("new", &plus, &git_new)] {
        if let Some(name) = name
            && Some(name) != git.as_ref()
        {
            return Err(c.err(patch_line, format!("inconsistent {side} file name: {name:?} in the ---/+++ lines, {:?} in the diff --git line", git.as_deref().unwrap_or(""))));
        }
    }
    fp.old_path = if h.is_new {
        None
    } else {
        h.rename_from.clone().or(minus).or(git_old)
    };
    fp.new_path = if h.is_delete {
        None
    } else {
        h.rename_to.clone().or(plus).or(git_new)
    };
    if h.minus.is_some() != h.plus.is_some() {
        return Err(c.err(
            patch_line,
            "a file diff has a \"---\" line without \"+++\" (or the reverse)",
        ));
    }
    if (h.is_new && h.minus.as_ref().is_some_and(Option::is_some))
        || (h.is_delete && h.plus.as_ref().is_some_and(Option::is_some))
    {
        return Err(c.err(
            patch_line,
            "new/deleted file headers disagree with the ---/+++ lines",
        ));
    }
    for p in [&fp.old_path, &fp.new_path].into_iter().flatten() {
        check_rel_path(p).map_err(|m| bad_path(c, patch_line, m))?;
    }
    if h.is_new && h.is_delete {
        return Err(c.err(
            patch_line,
            "a file diff cannot both create and delete a file",
        ));
    }
    Ok(())
}

/// The hunks of one file diff; a body line right after the last one means its header undercounts.
fn parse_hunks(c: &mut Cursor, fp: &mut FilePatch) -> Result<()> {
    while let Some(l) = c.peek() {
        if !l.starts_with("@@ ") {
            break;
        }
        fp.hunks.push(parse_hunk(c)?);
    }
    // A hunk body line right after a complete hunk: its header undercounts.
    if let (Some(h), Some(l)) = (fp.hunks.last(), c.peek())
        && (l.starts_with('+') || l.starts_with(' ') || (l.starts_with('-') && l != "-- "))
    {
        return Err(c
            .err(
                h.patch_line,
                format!(
                    "hunk header says -{},{} +{},{} but line {} continues the hunk",
                    h.old_start,
                    h.old_len,
                    h.new_start,
                    h.new_len,
                    c.line_no()
                ),
            )
            .with_help(
                Help::new("the patch was edited by hand; regenerate it with ")
                    .step(NextStep::plain("refresh"))
                    .text(" or `git format-patch`"),
            ));
    }
    Ok(())
}

fn side_path(c: &Cursor, n: usize, v: &str, prefix: &str) -> Result<Option<String>> {
    // git may append a tab and a timestamp after the path in foreign diffs.
    let v = v.split('\t').next().unwrap_or(v);
    if v == "/dev/null" {
        return Ok(None);
    }
    let p = unquote(v).unwrap_or_else(|| v.to_string());
    match p.strip_prefix(prefix) {
        Some(p) => {
            check_rel_path(p).map_err(|m| bad_path(c, n, m))?;
            Ok(Some(p.to_string()))
        }
        None => Err(c.err(
            n,
            format!("expected a path starting with {prefix:?} (git's -p1 form), found {v:?}"),
        )),
    }
}

fn parse_range(s: &str) -> Option<(usize, usize)> {
    match s.split_once(',') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => Some((s.parse().ok()?, 1)),
    }
}

fn parse_hunk(c: &mut Cursor) -> Result<Hunk> {
    let mut h = parse_hunk_header(c)?;
    let (mut old_seen, mut new_seen) = (0, 0);
    while old_seen < h.old_len || new_seen < h.new_len {
        let n = c.line_no();
        let Some(l) = c.peek() else {
            return Err(counts_lie(
                c,
                &h,
                (old_seen, new_seen),
                "truncated at end of file",
            ));
        };
        if !c.terminated[c.pos] {
            return Err(c.err(n, "truncated patch: the last line has no newline"));
        }
        // "-- " is also a removed "- " line; it is the signature separator when only the version follows.
        if l == "-- "
            && c.lines[c.pos + 1..]
                .iter()
                .filter(|x| !x.is_empty())
                .count()
                <= 1
        {
            let why = format!("line {n} is the signature separator");
            return Err(counts_lie(c, &h, (old_seen, new_seen), &why));
        }
        let (kind, text) = match l.as_bytes().first() {
            Some(b' ') => (LineKind::Context, &l[1..]),
            Some(b'-') => (LineKind::Remove, &l[1..]),
            Some(b'+') => (LineKind::Add, &l[1..]),
            // Some mailers strip the lone space of an empty context line; git accepts that too.
            None => (LineKind::Context, ""),
            Some(b'\\') => {
                c.next();
                mark_no_newline(&mut h, c, n)?;
                continue;
            }
            _ => {
                let why = format!("line {n} is not part of a hunk");
                return Err(counts_lie(c, &h, (old_seen, new_seen), &why));
            }
        };
        match kind {
            LineKind::Context => {
                old_seen += 1;
                new_seen += 1
            }
            LineKind::Remove => old_seen += 1,
            LineKind::Add => new_seen += 1,
        }
        if old_seen > h.old_len || new_seen > h.new_len {
            let why = format!("line {n} overflows the counts");
            return Err(counts_lie(c, &h, (old_seen, new_seen), &why));
        }
        if h.old_missing_newline && kind != LineKind::Add
            || h.new_missing_newline && kind != LineKind::Remove
        {
            return Err(c.err(
                n,
                "a line follows \"\\ No newline at end of file\" on the same side",
            ));
        }
        h.lines.push(Line {
            kind,
            text: text.to_string(),
        });
        c.next();
    }
    if let Some(l) = c.peek()
        && l.starts_with('\\')
    {
        let n = c.line_no();
        c.next();
        mark_no_newline(&mut h, c, n)?;
    }
    // A context line marked missing-newline is missing it on both sides.
    Ok(h)
}

/// A hunk's `@@ -a,b +c,d @@ heading` line, as a hunk with no lines yet.
fn parse_hunk_header(c: &mut Cursor) -> Result<Hunk> {
    let patch_line = c.line_no();
    let header = c.next().expect("peeked");
    let bad = || c.err(patch_line, format!("malformed hunk header {header:?}"));
    let rest = header.strip_prefix("@@ -").ok_or_else(bad)?;
    let (ranges, heading) = rest.split_once(" @@").ok_or_else(bad)?;
    let (old, new) = ranges.split_once(" +").ok_or_else(bad)?;
    let (old_start, old_len) = parse_range(old).ok_or_else(bad)?;
    let (new_start, new_len) = parse_range(new).ok_or_else(bad)?;
    Ok(Hunk {
        old_start,
        old_len,
        new_start,
        new_len,
        heading: heading.strip_prefix(' ').unwrap_or(heading).to_string(),
        lines: Vec::new(),
        old_missing_newline: false,
        new_missing_newline: false,
        patch_line,
    })
}

/// A hunk whose body does not have the lines its header counts: `seen` old and new lines, and why.
fn counts_lie(c: &Cursor, h: &Hunk, (o, n): (usize, usize), why: &str) -> Error {
    let (old_start, old_len, new_start, new_len) = (h.old_start, h.old_len, h.new_start, h.new_len);
    c.err(h.patch_line, format!(
        "hunk header says -{old_start},{old_len} +{new_start},{new_len} but the body has {o} old and {n} new lines ({why})"
    ))
    .with_help(
        Help::new("the patch was edited by hand or truncated; regenerate it with ")
            .step(NextStep::plain("refresh"))
            .text(" or `git format-patch`"),
    )
}

fn mark_no_newline(h: &mut Hunk, c: &Cursor, n: usize) -> Result<()> {
    match h.lines.last().map(|l| l.kind) {
        Some(LineKind::Context) => {
            h.old_missing_newline = true;
            h.new_missing_newline = true;
        }
        Some(LineKind::Remove) => h.old_missing_newline = true,
        Some(LineKind::Add) => h.new_missing_newline = true,
        None => return Err(c.err(n, "\"\\ No newline at end of file\" before any line")),
    }
    Ok(())
}

/// Parses bare `diff --git` sections (no mail header), e.g. what libgit2 prints for a diff.
pub(crate) fn parse_file_diffs(path: &Path, text: &str) -> Result<Vec<FilePatch>> {
    let mut c = Cursor::new(path, text);
    let mut out = Vec::new();
    while let Some(l) = c.peek() {
        if l.starts_with("diff --git ") {
            out.push(parse_file(&mut c)?);
        } else {
            c.next();
        }
    }
    Ok(out)
}
