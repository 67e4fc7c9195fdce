//! Writing overlays in `git format-patch` form.

use crate::error::Result;
use crate::patch::{FilePatch, Overlay, RenderFile, render_diff, render_diffstat};
use crate::tree::{BlobSource, Tree};

/// git abbreviates blob ids in `index` lines; any length git accepts works for `git am`. New
/// overlays get this many digits; a rewritten overlay keeps the width it had ([`index_width`]).
pub const ABBREV: usize = 12;

/// The abbreviation width of the first `index` line in `raw` (an overlay's text), if it has one
/// git could have written (7 to 40 hex digits): rewriting an overlay must not turn git's 7-digit
/// ids into 12-digit ones for files it did not change.
pub fn index_width(raw: &str) -> Option<usize> {
    raw.lines()
        .filter_map(|l| l.strip_prefix("index "))
        .filter_map(|rest| rest.split_once(".."))
        .map(|(old, _)| old)
        .find(|old| old.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::len)
        .filter(|w| (7..=40).contains(w))
}

fn abbrev(tree: &Tree, path: Option<&str>, width: usize) -> String {
    match path.and_then(|p| tree.blob_id(p)) {
        Some(id) => id.to_string()[..width].to_string(),
        None => "0".repeat(width),
    }
}

/// The text after the `---` line: diffstat, diffs and signature. `before`/`after` are the trees the
/// files go between (for the index lines, abbreviated to `width` digits: [`ABBREV`] for a new
/// overlay, [`index_width`] of the old text for a rewritten one).
pub fn render_patch_body(
    files: &[FilePatch],
    before: &Tree,
    after: &Tree,
    signature: &str,
    width: usize,
    _src: &dyn BlobSource,
) -> Result<String> {
    let mut out = String::new();
    let refs: Vec<&FilePatch> = files.iter().collect();
    render_diffstat(&mut out, &refs);
    out.push('\n');
    let render: Vec<RenderFile<'_>> = files
        .iter()
        .map(|f| RenderFile {
            patch: f,
            old_id: abbrev(before, f.old_path.as_deref(), width),
            new_id: abbrev(after, f.new_path.as_deref(), width),
            similarity: None,
            mode: f
                .new_path
                .as_deref()
                .and_then(|p| after.entries.get(p))
                .map_or(crate::tree::MODE_FILE, |e| e.mode),
        })
        .collect();
    render_diff(&mut out, &render);
    out.push_str("-- \n");
    out.push_str(signature);
    out.push_str("\n\n");
    Ok(out)
}

/// What an overlay's text keeps around its diff: the header and message before it (through the
/// `---` line), the signature after it, and how many digits its `index` lines' blob ids have.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    /// The mbox header and message, through the `---` line.
    pub prelude: &'a str,
    /// The signature after `-- `.
    pub signature: &'a str,
    /// The `index` lines' width ([`ABBREV`] for a new overlay).
    pub width: usize,
}

impl<'a> Layout<'a> {
    /// `ov`'s own: its prelude, its signature (`overlay` when it has none), its `index` width
    /// ([`ABBREV`] when it has none git could have written).
    pub fn of(ov: &'a Overlay) -> Layout<'a> {
        Layout {
            prelude: &ov.prelude,
            signature: ov.signature.as_deref().unwrap_or("overlay"),
            width: index_width(&ov.raw).unwrap_or(ABBREV),
        }
    }
}

/// An overlay's text with `files` (between `before` and `after`) as its diff, laid out as
/// `layout` says: the one way the engine writes (or re-writes) an overlay.
pub fn patch(
    layout: &Layout<'_>,
    files: &[FilePatch],
    before: &Tree,
    after: &Tree,
    src: &dyn BlobSource,
) -> Result<String> {
    let body = render_patch_body(files, before, after, layout.signature, layout.width, src)?;
    Ok(format!("{}{body}", layout.prelude))
}

/// The mbox header and message of a new overlay, through the `---` line.
pub fn new_prelude(
    author: &str,
    date: &str,
    subject: &str,
    body: &str,
    trailers: &[(String, String)],
) -> String {
    let mut s = format!(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: {author}\nDate: {date}\nSubject: [PATCH] {subject}\n\n"
    );
    if !body.trim().is_empty() {
        s.push_str(body.trim_end());
        s.push_str("\n\n");
    }
    for (k, v) in trailers {
        s.push_str(&format!("{k}: {v}\n"));
    }
    s.push_str("---\n");
    s
}

/// RFC 2822 date as git writes it, from seconds since the epoch and an offset in minutes.
pub fn rfc2822(secs: i64, offset_min: i32) -> String {
    let t = secs + offset_min as i64 * 60;
    let days = t.div_euclid(86400);
    let rem = t.rem_euclid(86400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(mo - 1) as usize];
    let sign = if offset_min < 0 { '-' } else { '+' };
    let off = offset_min.abs();
    format!(
        "{wd}, {d} {mon} {y} {h:02}:{m:02}:{s:02} {sign}{:02}{:02}",
        off / 60,
        off % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_like_git() {
        assert_eq!(super::rfc2822(0, 0), "Thu, 1 Jan 1970 00:00:00 +0000");
        assert_eq!(
            super::rfc2822(1_796_000_000, 60),
            "Mon, 30 Nov 2026 01:53:20 +0100"
        );
    }
}
