//! Rendering hunks, diffs and git's diffstat, byte for byte as git writes them.

use std::fmt::Write as _;

use super::*;

// Rendering, in the exact shape `git format-patch` writes.

/// The `diff --git` sections of `files`, as git writes them (index lines from blob ids).
pub fn render_diff(out: &mut String, files: &[RenderFile<'_>]) {
    for f in files {
        let fp = f.patch;
        let (a, b) = (
            fp.old_path.as_deref().unwrap_or(fp.path()),
            fp.new_path.as_deref().unwrap_or(fp.path()),
        );
        let _ = writeln!(
            out,
            "diff --git {} {}",
            quote_path("a/", a),
            quote_path("b/", b)
        );
        let mode_suffix = match (fp.old_mode, fp.new_mode) {
            _ if fp.is_new() => {
                let _ = writeln!(out, "new file mode {:o}", fp.new_mode.unwrap_or(0o100644));
                String::new()
            }
            _ if fp.is_delete() => {
                let _ = writeln!(
                    out,
                    "deleted file mode {:o}",
                    fp.old_mode.unwrap_or(0o100644)
                );
                String::new()
            }
            (Some(o), Some(n)) if o != n => {
                let _ = writeln!(out, "old mode {o:o}\nnew mode {n:o}");
                String::new()
            }
            (_, Some(n)) | (Some(n), None) => format!(" {n:o}"),
            (None, None) => format!(" {:o}", f.mode),
        };
        if fp.is_rename() {
            let _ = writeln!(out, "similarity index {}%", f.similarity.unwrap_or(0));
            // Quoted like git: a name may hold a newline (found by fuzzing).
            let _ = writeln!(
                out,
                "rename from {}\nrename to {}",
                quote_path("", a),
                quote_path("", b)
            );
        }
        if !fp.hunks.is_empty() || fp.is_new() || fp.is_delete() {
            let _ = writeln!(out, "index {}..{}{}", f.old_id, f.new_id, mode_suffix);
        }
        if !fp.hunks.is_empty() {
            let _ = writeln!(
                out,
                "--- {}\n+++ {}",
                fp.old_path
                    .as_deref()
                    .map_or("/dev/null".to_string(), |p| quote_path("a/", p)),
                fp.new_path
                    .as_deref()
                    .map_or("/dev/null".to_string(), |p| quote_path("b/", p)),
            );
        }
        for h in &fp.hunks {
            render_hunk(out, h);
        }
    }
}

/// What `render_diff` needs beyond the patch: abbreviated blob ids and rename similarity.
pub struct RenderFile<'a> {
    /// The file diff.
    pub patch: &'a FilePatch,
    /// Old blob id, abbreviated as the `index` line shows it.
    pub old_id: String,
    /// New blob id, abbreviated likewise.
    pub new_id: String,
    /// Rename similarity in percent, for a rename.
    pub similarity: Option<u32>,
    /// The file's mode, for the `index` line of a modification that keeps it.
    pub mode: u32,
}

fn range(start: usize, len: usize) -> String {
    if len == 1 {
        start.to_string()
    } else {
        format!("{start},{len}")
    }
}

/// One hunk: its `@@` line and body, as git writes them.
pub fn render_hunk(out: &mut String, h: &Hunk) {
    let _ = write!(
        out,
        "@@ -{} +{} @@",
        range(h.old_start, h.old_len),
        range(h.new_start, h.new_len)
    );
    if !h.heading.is_empty() {
        let _ = write!(out, " {}", h.heading);
    }
    out.push('\n');
    let last_old = h.lines.iter().rposition(|l| l.kind != LineKind::Add);
    let last_new = h.lines.iter().rposition(|l| l.kind != LineKind::Remove);
    for (i, l) in h.lines.iter().enumerate() {
        out.push(match l.kind {
            LineKind::Context => ' ',
            LineKind::Remove => '-',
            LineKind::Add => '+',
        });
        out.push_str(&l.text);
        out.push('\n');
        let eof_old = h.old_missing_newline && Some(i) == last_old;
        let eof_new = h.new_missing_newline && Some(i) == last_new;
        if eof_old || eof_new {
            out.push_str("\\ No newline at end of file\n");
        }
    }
}

pub(super) fn quote_path(prefix: &str, p: &str) -> String {
    let needs = p
        .bytes()
        .any(|b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x80);
    if !needs {
        return format!("{prefix}{p}");
    }
    let mut s = String::from("\"");
    s.push_str(prefix);
    for b in p.bytes() {
        match b {
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b if !(0x20..0x80).contains(&b) => {
                let _ = write!(s, "\\{b:03o}");
            }
            b => s.push(b as char),
        }
    }
    s.push('"');
    s
}

/// git's diffstat for `files` (format-patch uses a 72-column budget).
pub fn render_diffstat(out: &mut String, files: &[&FilePatch]) {
    let entries = stat_entries(files);
    let w = StatWidths::of(&entries);
    let (mut tadd, mut tdel) = (0, 0);
    for (name, add, del) in &entries {
        tadd += add;
        tdel += del;
        stat_line(out, &w, name, *add, *del);
    }
    stat_totals(out, entries.len(), tadd, tdel);
    summary_lines(out, files);
}

/// Per file: the name as the stat shows it, lines added, lines removed.
fn stat_entries(files: &[&FilePatch]) -> Vec<(String, usize, usize)> {
    files
        .iter()
        .map(|f| {
            let (add, del) =
                f.hunks
                    .iter()
                    .flat_map(|h| &h.lines)
                    .fold((0, 0), |(a, d), l| match l.kind {
                        LineKind::Add => (a + 1, d),
                        LineKind::Remove => (a, d + 1),
                        LineKind::Context => (a, d),
                    });
            let name = match (&f.old_path, &f.new_path) {
                (Some(a), Some(b)) if a != b => rename_name(a, b),
                _ => f.path().to_string(),
            };
            // Quoted like git's, so a name holding a newline cannot start a line of its own
            // (e.g. a false "diff --git" before the first real one; found by fuzzing).
            (quote_path("", &name), add, del)
        })
        .collect()
}

/// The column budget of a diffstat: git's diff.c show_stats with format-patch's 72 columns.
struct StatWidths {
    name: usize,
    graph: usize,
    number: usize,
    max_change: usize,
}

impl StatWidths {
    fn of(entries: &[(String, usize, usize)]) -> StatWidths {
        let max_change = entries.iter().map(|e| e.1 + e.2).max().unwrap_or(0);
        let max_len = entries
            .iter()
            .map(|e| e.0.chars().count())
            .max()
            .unwrap_or(0);
        let number_width = max_change.to_string().len();
        let width = 72usize.max(16 + 6 + number_width);
        let mut graph_width = max_change;
        let mut name_width = max_len;
        if name_width + number_width + 6 + graph_width > width {
            let cap = (width * 3 / 8).saturating_sub(number_width + 6);
            if graph_width > cap {
                graph_width = cap.max(6);
            }
            if name_width > width - number_width - 6 - graph_width {
                name_width = width - number_width - 6 - graph_width;
            } else {
                graph_width = width - number_width - 6 - name_width;
            }
        }
        StatWidths {
            name: name_width,
            graph: graph_width,
            number: number_width,
            max_change,
        }
    }

    /// At least one mark for any change: scale as if one column shorter, then add one.
    fn scale(&self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            1 + n * (self.graph - 1) / self.max_change
        }
    }
}

/// One ` name | N +++--` line.
fn stat_line(out: &mut String, w: &StatWidths, name: &str, add: usize, del: usize) {
    let len = name.chars().count();
    let shown = if w.name < len {
        let keep = w.name.saturating_sub(3);
        let tail: String = name.chars().skip(len - keep).collect();
        // git restarts the shown name at a directory boundary when it can.
        let tail = match tail.find('/') {
            Some(i) => tail[i..].to_string(),
            None => tail,
        };
        format!("...{tail}")
    } else {
        name.to_string()
    };
    let pad = w.name.saturating_sub(shown.chars().count());
    let (mut a, mut d) = (add, del);
    if w.graph <= w.max_change {
        let mut total = w.scale(a + d);
        if total < 2 && a > 0 && d > 0 {
            total = 2;
        }
        if a < d {
            a = w.scale(a);
            d = total - a;
        } else {
            d = w.scale(d);
            a = total - d;
        }
    }
    let graph = if add + del > 0 {
        format!(" {}{}", "+".repeat(a), "-".repeat(d))
    } else {
        String::new()
    };
    let number_width = w.number;
    let _ = writeln!(
        out,
        " {shown}{} | {:>number_width$}{graph}",
        " ".repeat(pad),
        add + del
    );
}

/// ` N files changed, N insertions(+), N deletions(-)`.
fn stat_totals(out: &mut String, files_n: usize, tadd: usize, tdel: usize) {
    let _ = write!(
        out,
        " {files_n} file{} changed",
        if files_n == 1 { "" } else { "s" }
    );
    if tadd > 0 || tdel == 0 {
        let _ = write!(
            out,
            ", {tadd} insertion{}(+)",
            if tadd == 1 { "" } else { "s" }
        );
    }
    if tdel > 0 || tadd == 0 {
        let _ = write!(
            out,
            ", {tdel} deletion{}(-)",
            if tdel == 1 { "" } else { "s" }
        );
    }
    out.push('\n');
}

/// git's --summary lines, which format-patch prints after the stat.
fn summary_lines(out: &mut String, files: &[&FilePatch]) {
    for f in files {
        if f.is_new() {
            let _ = writeln!(
                out,
                " create mode {:o} {}",
                f.new_mode.unwrap_or(0o100644),
                quote_path("", f.path())
            );
        } else if f.is_delete() {
            let _ = writeln!(
                out,
                " delete mode {:o} {}",
                f.old_mode.unwrap_or(0o100644),
                quote_path("", f.path())
            );
        } else if f.is_rename() {
            let _ = writeln!(
                out,
                " rename {} (100%)",
                quote_path(
                    "",
                    &rename_name(f.old_path.as_deref().unwrap_or(""), f.path())
                )
            );
        }
        if let (Some(o), Some(n)) = (f.old_mode, f.new_mode)
            && o != n
            && !f.is_new()
            && !f.is_delete()
        {
            let _ = writeln!(
                out,
                " mode change {o:o} => {n:o} {}",
                quote_path("", f.path())
            );
        }
    }
}

fn rename_name(a: &str, b: &str) -> String {
    // git: common prefix/suffix folded into "{old => new}".
    let pre = a
        .char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .filter(|((_, x), _)| *x == '/')
        .map(|((i, _), _)| i + 1)
        .last()
        .unwrap_or(0);
    let (ra, rb) = (&a[pre..], &b[pre..]);
    let suf = ra
        .char_indices()
        .rev()
        .zip(rb.chars().rev())
        .take_while(|((_, x), y)| x == y)
        .filter(|((_, x), _)| *x == '/')
        .map(|((i, _), _)| ra.len() - i)
        .last()
        .unwrap_or(0);
    if pre == 0 && suf == 0 {
        return format!("{a} => {b}");
    }
    format!(
        "{}{{{} => {}}}{}",
        &a[..pre],
        &ra[..ra.len() - suf],
        &rb[..rb.len() - suf],
        &ra[ra.len() - suf..]
    )
}
