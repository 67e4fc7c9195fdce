//! `export-upstream`: turn upstreamable overlays into a clean `git format-patch` series for the
//! upstream project, re-based (3-way merge, as `bump-pin` does) onto any upstream commit, with the
//! fork's trailers removed. Local-only overlays never leave the fork.

pub mod verify;

use std::collections::BTreeSet;

use crate::error::{Error, Refusal, Result};
use crate::merge::{Labels, canonical_files, merge3};
use crate::patch::{Overlay, OverlayKind};
use crate::render::{self, Layout};
use crate::series::Series;
use crate::tree::{BlobSource, Content, Entry, MODE_FILE, Tree};

/// The conflict markers' labels of an export's merge.
const EXPORT_LABELS: Labels<'static> = Labels {
    base: "fork",
    ours: "overlay",
    theirs: "upstream",
};

#[derive(Debug, Clone, serde::Serialize)]
/// One overlay rewritten for upstream.
pub struct Exported {
    /// The overlay it comes from.
    pub overlay: String,
    /// File name in the exported series (`0001-<slug>.patch`).
    pub file_name: String,
    #[serde(skip)]
    /// The `git format-patch` text to write.
    pub raw: String,
}

/// Why an overlay could not be exported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Blocked {
    /// The overlay that could not be exported.
    pub overlay: String,
    /// The file whose merge conflicts.
    pub file: String,
    /// 1-based hunk of the overlay in that file, when the conflict maps to one.
    pub hunk: Option<usize>,
    /// Local-only (or unselected) overlays earlier in the series that touch the same file.
    pub needs: Vec<String>,
}

#[derive(Debug)]
/// What [`export`] produced.
pub enum Outcome {
    /// Every selected overlay, in series order.
    Exported(Vec<Exported>),
    /// The first overlay that could not be re-based, and why.
    Blocked(Blocked),
}

/// Which overlays to export: all upstreamable ones, or the named ones (naming a local-only one is an
/// error). Indexes into the series, in series order.
pub fn select(series: &Series, names: &[String]) -> Result<Vec<usize>> {
    if names.is_empty() {
        return Ok(series
            .overlays
            .iter()
            .enumerate()
            .filter(|(_, o)| o.trailers.kind == OverlayKind::Upstreamable)
            .map(|(i, _)| i)
            .collect());
    }
    let mut out = Vec::new();
    for n in names {
        let Some(i) = series.overlays.iter().position(|o| &o.name == n) else {
            return Err(Error::input(
                series.dir.join(crate::series::SERIES_FILE),
                None,
                format!("--overlay {n}: no such overlay in the series"),
            ));
        };
        if series.overlays[i].trailers.kind == OverlayKind::LocalOnly {
            return Err(Error::refused(&series.overlays[i].path, None, Refusal::LocalOnly { overlay: n.clone() })
                .with_help("export only upstreamable overlays; change its Overlay-Kind trailer if it really belongs upstream"));
        }
        out.push(i);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The message without the fork's trailers, plus `Signed-off-by` when given.
pub fn clean_message(body: &str, signoff: Option<&str>) -> String {
    let mut lines: Vec<&str> = body
        .lines()
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(k, _)| crate::patch::trailers::is_fork_trailer(k.trim()))
        })
        .collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let mut s = lines.join("\n");
    if let Some(id) = signoff {
        let sob = format!("Signed-off-by: {id}");
        if !lines.contains(&sob.as_str()) {
            let last_is_trailer = lines
                .last()
                .is_some_and(|l| l.split_once(": ").is_some_and(|(k, _)| !k.contains(' ')));
            s.push_str(if last_is_trailer { "\n" } else { "\n\n" });
            s.push_str(&sob);
        }
    }
    s
}

fn slug(subject: &str) -> String {
    let mut s = String::new();
    for c in subject.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            s.push(c);
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    let s = s.trim_matches(['-', '.']).to_string();
    s.chars()
        .take(52)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// Re-bases the `selected` overlays of `series` (written against `pin`) onto `onto`.
pub fn export(
    pin: &Tree,
    onto: &Tree,
    series: &Series,
    selected: &[usize],
    src: &dyn BlobSource,
    signoff: Option<&str>,
) -> Result<Outcome> {
    let mut old_chain = pin.clone();
    let mut new_chain = onto.clone();
    let mut out = Vec::new();
    for (i, ov) in series.overlays.iter().enumerate() {
        let mut old_next = old_chain.clone();
        old_next.apply_overlay(ov, src)?;
        if !selected.contains(&i) {
            old_chain = old_next;
            continue;
        }
        let chains = Chains {
            old: &old_chain,
            next: &old_next,
            new: &new_chain,
        };
        let mut merged = new_chain.clone();
        for fp in &ov.files {
            if !merge_file(&chains, fp, &mut merged, src)? {
                let p = fp.path();
                return Ok(Outcome::Blocked(Blocked {
                    overlay: ov.name.clone(),
                    file: p.to_string(),
                    hunk: first_unplaceable(ov, fp, &new_chain, src)?,
                    needs: unexported_before(series, i, selected, p),
                }));
            }
        }
        let n = out.len() + 1;
        out.push(render_exported(
            ov,
            (n, selected.len()),
            &new_chain,
            &merged,
            src,
            signoff,
        )?);
        new_chain = merged;
        old_chain = old_next;
    }
    Ok(Outcome::Exported(out))
}

/// The trees one overlay's export reads: the fork's chain before it (`old`) and after it
/// (`next`), and the exported chain so far (`new`).
struct Chains<'a> {
    old: &'a Tree,
    next: &'a Tree,
    new: &'a Tree,
}

/// One file of an overlay merged onto the exported chain, written into `merged`; `false` when a
/// hunk does not merge (the export is blocked there).
fn merge_file(
    chains: &Chains,
    fp: &crate::patch::FilePatch,
    merged: &mut Tree,
    src: &dyn BlobSource,
) -> Result<bool> {
    let p = fp.path();
    let side = |tree: &Tree, path: Option<&str>| -> Result<Option<Vec<u8>>> {
        Ok(path.map(|p| tree.bytes(p, src)).transpose()?.flatten())
    };
    let base = side(chains.old, fp.old_path.as_deref())?;
    let ours = side(chains.next, fp.new_path.as_deref())?;
    let theirs = chains.new.bytes(fp.old_path.as_deref().unwrap_or(p), src)?;
    let bytes = match (&base, &ours, &theirs) {
        (None, Some(o), None) => o.clone(),
        (Some(b), None, Some(t)) if b == t => {
            merged.entries.remove(p);
            return Ok(true);
        }
        (Some(b), Some(o), Some(t)) => match merge3(b, o, t, p, EXPORT_LABELS)? {
            Ok(bytes) => bytes,
            Err(_) => return Ok(false),
        },
        _ => return Ok(false),
    };
    let mode = fp
        .new_mode
        .or_else(|| chains.new.entries.get(p).map(|e| e.mode))
        .unwrap_or(MODE_FILE);
    if let Some(old) = &fp.old_path
        && fp.is_rename()
    {
        merged.entries.remove(old);
    }
    merged.entries.insert(
        fp.new_path.clone().unwrap_or_else(|| p.to_string()),
        Entry {
            mode,
            content: Content::Bytes(bytes.into()),
        },
    );
    Ok(true)
}

/// The overlays before the `i`-th, not exported, that change `path`: the blocked hunk needs them.
fn unexported_before(series: &Series, i: usize, selected: &[usize], path: &str) -> Vec<String> {
    series.overlays[..i]
        .iter()
        .enumerate()
        .filter(|(j, o)| {
            !selected.contains(j)
                && o.files
                    .iter()
                    .any(|f| f.path() == path || f.old_path.as_deref() == Some(path))
        })
        .map(|(_, o)| o.name.clone())
        .collect()
}

/// The exported patch of `ov`, the `n`-th of `total`: `new_chain` to `merged` over the paths it
/// touches, with its mbox header and cleaned message; refused when upstream already has it all.
fn render_exported(
    ov: &Overlay,
    (n, total): (usize, usize),
    new_chain: &Tree,
    merged: &Tree,
    src: &dyn BlobSource,
    signoff: Option<&str>,
) -> Result<Exported> {
    let paths: BTreeSet<String> = ov.touched_paths().collect();
    let files = canonical_files(new_chain, merged, &paths, src)?;
    if files.is_empty() {
        return Err(
            Error::refused(&ov.path, None, Refusal::AlreadyUpstream).with_help(
                "leave it out with --overlay, or retire it with `bump-pin --drop-upstreamed`",
            ),
        );
    }
    let prelude = mbox_prelude(ov, (n, total), signoff);
    let layout = Layout {
        prelude: &prelude,
        ..Layout::of(ov)
    };
    Ok(Exported {
        overlay: ov.name.clone(),
        file_name: format!("{n:04}-{}.patch", slug(&ov.subject)),
        raw: render::patch(&layout, &files, new_chain, merged, src)?,
    })
}

/// The mbox header, subject (`[PATCH n/total]`), cleaned message and `---` of an exported patch.
fn mbox_prelude(ov: &Overlay, (n, total): (usize, usize), signoff: Option<&str>) -> String {
    let subject = if total > 1 {
        format!("[PATCH {n}/{total}] {}", ov.subject)
    } else {
        format!("[PATCH] {}", ov.subject)
    };
    let message = clean_message(&ov.body, signoff);
    let mut prelude = format!(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: {}\n",
        ov.author
    );
    if !ov.date.is_empty() {
        prelude.push_str(&format!("Date: {}\n", ov.date));
    }
    prelude.push_str(&format!("Subject: {subject}\n\n"));
    if !message.trim().is_empty() {
        prelude.push_str(message.trim_start_matches('\n'));
        prelude.push('\n');
    }
    prelude.push_str("---\n");
    prelude
}

fn first_unplaceable(
    ov: &Overlay,
    fp: &crate::patch::FilePatch,
    tree: &Tree,
    src: &dyn BlobSource,
) -> Result<Option<usize>> {
    let Some(p) = fp.old_path.as_deref() else {
        return Ok(None);
    };
    let Some(bytes) = tree.bytes(p, src)? else {
        return Ok(None);
    };
    let text = crate::apply::Text::parse(&String::from_utf8_lossy(&bytes));
    let _ = ov;
    Ok(fp
        .hunks
        .iter()
        .position(|h| crate::apply::locate(&text, h, 0, 0).is_err())
        .map(|i| i + 1))
}
