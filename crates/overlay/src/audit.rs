//! The resolution audit: every line a new version of an overlay drops that is not its own to drop.
//!
//! A new version of an overlay (a conflict resolved at `bump-pin --continue`, an import, a refresh)
//! is a text `post` written over the text it applies to, `pre` (upstream at the pin with the
//! earlier overlays applied). Two kinds of lines in `pre` are protected:
//!
//! - lines an **earlier overlay** of the series added (ownership is followed through the chain of
//!   earlier overlays, each step a git diff);
//! - lines **upstream** added or changed after the overlay's base (`base`: the text the overlay's
//!   previous version applied to, or upstream's file at its `Base:` commit): the lines of `pre` a
//!   git diff `base -> pre` adds that no earlier overlay owns.
//!
//! A protected line `post` deletes is a [`LossKind::Dropped`] loss, and a line upstream deleted
//! after the base that `post` still has where `base` had it (and `pre` has nowhere) is a
//! [`LossKind::Resurrected`] one. Decided by content, not position, a deleted line is still kept
//! when:
//!
//! - the overlay's previous version deleted the same line (its own decision, carried);
//! - `post` adds the same tokens elsewhere in the file (the line moved or was re-indented);
//! - an added line of the same hunk extends it (its tokens, in order, with at most as many new
//!   ones, none put back where upstream removed it: `#define V 2` kept as `#define V 2 // fork`);
//! - for a line upstream *added* (its diff hunk removed nothing), an added line of the same hunk
//!   has the same tokens but for identifiers the base's file has (a guard kept under the older
//!   names of its variables);
//! - for a line upstream *changed* (a new version of one base line, paired one to one by
//!   likeness: a line upstream split off or added beside the changed one is no version of it),
//!   the resolution's own version of that base line (the added line of the hunk most like it,
//!   not a line the base has as it is) carries each of upstream's edits to it, where both sides
//!   replaced the same words the resolution's may stay.
//!
//! A line upstream deleted is one its diff removes that is no old version of a line it added (or
//! only of one it shares no word with: replaced).
//!
//! Blank lines (no tokens) are not audited. Which upstream commit a loss comes from is the caller's
//! question ([`attribute`]), since only it knows the commits the texts are at.

use std::collections::{BTreeMap, BTreeSet};

use crate::apply::Text;
use crate::check::text_of;
use crate::error::Result;
use crate::patch::Overlay;
use crate::reverts::line_diff;
use crate::tree::{BlobSource, Tree};

/// The trailer confirming that an overlay drops lines an earlier overlay adds, on purpose, and
/// what an overlay's trailers confirm: read with the other trailers by `reverts::recorded`.
pub use crate::reverts::{ACCEPT_OVERLAY_TRAILER, Confirmed};

/// Who a protected line belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Origin {
    /// An earlier overlay of the series added it.
    Overlay {
        /// The overlay's file name.
        name: String,
    },
    /// Upstream added, changed or deleted it after the overlay's base.
    Upstream {
        /// The commit (`None`: none found between the base and the pin, e.g. a line an earlier
        /// overlay's previous version had).
        commit: Option<String>,
        /// The commit's subject line (empty without a commit).
        subject: String,
    },
}

/// What happened to a protected line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossKind {
    /// The overlay deletes it.
    Dropped,
    /// Upstream deleted it after the base, and the overlay brings it back.
    Resurrected,
}

/// One line a new version of an overlay loses (or brings back).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Loss {
    /// The file.
    pub file: String,
    /// Dropped or resurrected.
    pub kind: LossKind,
    /// Whose line it is.
    pub origin: Origin,
    /// 1-based: in `pre` for a dropped line, in `post` for a resurrected one.
    pub line: usize,
    /// The line's text.
    pub text: String,
    /// A trailer confirms it (`Reverts-Upstream: <commit>`, `Reverts-Overlay: <name>`).
    pub accepted: bool,
}

/// Who owns a line of `pre`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Upstream's line, at this 0-based line of upstream's file at the pin.
    Upstream(usize),
    /// Added by the earlier overlay of this name.
    Overlay(String),
}

/// The owners of the lines of the last text of a chain: `pin` (upstream's file) then each earlier
/// overlay's result, named.
pub fn owners(pin: &Text, steps: &[(&str, &Text)]) -> Result<Vec<Owner>> {
    let mut own: Vec<Owner> = (0..pin.lines.len()).map(Owner::Upstream).collect();
    let mut prev = pin;
    for (name, text) in steps {
        if *text == prev {
            continue;
        }
        let d = line_diff(prev, text)?;
        own = d
            .new_to_old
            .iter()
            .map(|o| match o {
                Some(o) => own[*o].clone(),
                None => Owner::Overlay(name.to_string()),
            })
            .collect();
        prev = text;
    }
    Ok(own)
}

/// One file's question.
pub struct FileAudit<'a> {
    /// The file.
    pub path: &'a str,
    /// What the overlay's base had (see the module's doc); `None`: upstream's lines at the pin are
    /// not protected (the overlay is written at its base).
    pub base: Option<&'a Text>,
    /// The text the overlay applies to.
    pub pre: &'a Text,
    /// The owner of each line of `pre` ([`owners`]).
    pub owners: &'a [Owner],
    /// The overlay's result.
    pub post: &'a Text,
    /// The lines the overlay's previous version deleted (its own decisions), if any.
    pub own_removed: &'a [String],
}

/// A loss before attribution: upstream's lines name their line at the pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLoss {
    /// Dropped or resurrected.
    pub kind: LossKind,
    /// The owner (for a resurrected line: `Upstream` with its 0-based line in `base`).
    pub owner: Owner,
    /// 0-based: in `pre` (dropped) or `post` (resurrected).
    pub at: usize,
    /// The line's text.
    pub text: String,
}

/// The losses of one file, in line order: dropped lines, then resurrected ones.
pub fn audit_file(q: &FileAudit<'_>) -> Result<Vec<RawLoss>> {
    if q.pre == q.post {
        return Ok(Vec::new());
    }
    let d = line_diff(q.pre, q.post)?;
    let upstream = match q.base {
        Some(b) => Some(Upstream::new(b, q.pre)?),
        None => None,
    };
    let mut kept = Kept::new(q, &d);
    let mut out = Vec::new();
    for &i in &d.removed {
        let owner = &q.owners[i];
        let protected = match (owner, &upstream) {
            (Owner::Overlay(_), _) => true,
            (Owner::Upstream(_), Some(u)) => u.added.contains(&i),
            (Owner::Upstream(_), None) => false,
        };
        let renamable = matches!(owner, Owner::Upstream(_))
            && upstream.as_ref().is_some_and(|u| u.pure_added.contains(&i));
        let change = upstream
            .as_ref()
            .and_then(|u| u.changes.get(&i).map(|b| (b, &u.base_lines)));
        if protected && !kept.keeps(i, renamable.then_some(q.base).flatten(), change) {
            out.push(RawLoss {
                kind: LossKind::Dropped,
                owner: owner.clone(),
                at: i,
                text: q.pre.lines[i].clone(),
            });
        }
    }
    if let Some(b) = q.base {
        let u = upstream.as_ref().expect("built with the base");
        out.extend(resurrected(b, q.pre, q.post, u)?);
    }
    Ok(out)
}

/// Upstream's change since the base, as lines of `pre`.
struct Upstream {
    /// Lines of `pre` the diff `base -> pre` adds.
    added: BTreeSet<usize>,
    /// Those of them in a hunk that removes nothing (added, not changed).
    pure_added: BTreeSet<usize>,
    /// For a changed line, the line its hunk removed from the base that it is a new version of
    /// (what upstream changed it from, [`pair_lines`]).
    changes: BTreeMap<usize, Vec<Tok>>,
    /// The base's lines, as tokens (empty when no line changed).
    base_lines: BTreeSet<Vec<Tok>>,
    /// Lines of the base the diff removes that are no old version of any line of `pre`
    /// ([`pair_lines`]), or only of one they share no word with: deleted, not changed.
    gone: BTreeSet<usize>,
    /// The other removed lines of the base: each with the line of `pre` that is its new version.
    replaced: BTreeMap<usize, usize>,
}

impl Upstream {
    fn new(base: &Text, pre: &Text) -> Result<Upstream> {
        let d = line_diff(base, pre)?;
        let added: BTreeSet<usize> = d.added.iter().copied().collect();
        let removed: BTreeSet<usize> = d.removed.iter().copied().collect();
        let mut hunks: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for &i in &added {
            hunks
                .entry(gap(&d.new_to_old, i, base.lines.len()))
                .or_default()
                .push(i);
        }
        let mut pure_added = BTreeSet::new();
        let mut changes = BTreeMap::new();
        let mut gone = removed.clone();
        let mut replaced = BTreeMap::new();
        for ((lo, hi), news) in hunks {
            let olds: Vec<usize> = (lo..hi).filter(|o| removed.contains(o)).collect();
            if olds.is_empty() {
                pure_added.extend(news);
                continue;
            }
            for (n, o, common) in pair_lines(&olds, base, &news, pre) {
                changes.insert(n, tokens(&base.lines[o]));
                // A line replaced by one that shares nothing with it is deleted too: kept beside
                // the new one, it is brought back.
                if common > 0 {
                    gone.remove(&o);
                    replaced.insert(o, n);
                }
            }
        }
        let base_lines = if changes.is_empty() {
            BTreeSet::new()
        } else {
            base.lines.iter().map(|l| tokens(l)).collect()
        };
        Ok(Upstream {
            added,
            pure_added,
            changes,
            base_lines,
            gone,
            replaced,
        })
    }
}

/// One hunk's changed lines: each new line with the old line it is a new version of, one to one,
/// the most alike first (the longest common subsequence of their [`words`]; ties in line order),
/// and only where that subsequence is at least half the shorter line. A new line left over (the
/// hunk adds more lines than it removes: a line split in two, a line added next to the changed
/// one), or one that shares little with every old line (a region rewritten), is new: no
/// version of any old line. A hunk that replaces one line by one line changed it, whatever the
/// two share (`10` by `ten upstream`). Each pair with the number of words the two share.
fn pair_lines(
    olds: &[usize],
    old: &Text,
    news: &[usize],
    new: &Text,
) -> Vec<(usize, usize, usize)> {
    let one = olds.len() == 1 && news.len() == 1;
    let ow: Vec<Vec<Tok>> = olds
        .iter()
        .map(|&o| words(&tokens(&old.lines[o])))
        .collect();
    let mut scored = Vec::with_capacity(olds.len() * news.len());
    for (ni, &n) in news.iter().enumerate() {
        let t = words(&tokens(&new.lines[n]));
        for (oi, b) in ow.iter().enumerate() {
            let common = lcs_pairs(b, &t).len();
            if one || (common > 0 && 2 * common >= b.len().min(t.len())) {
                scored.push((common, ni, oi));
            }
        }
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let (mut new_used, mut old_used) = (vec![false; news.len()], vec![false; olds.len()]);
    let mut out = Vec::new();
    for (common, ni, oi) in scored {
        if !new_used[ni] && !old_used[oi] {
            (new_used[ni], old_used[oi]) = (true, true);
            out.push((news[ni], olds[oi], common));
        }
    }
    out
}

/// For an unpaired line `i` of one side, the range of the other side's lines between its paired
/// neighbours (the other side of its hunk); `map` pairs this side's lines with the other's.
fn gap(new_to_old: &[Option<usize>], i: usize, old_len: usize) -> (usize, usize) {
    let lo = new_to_old[..i]
        .iter()
        .rev()
        .find_map(|o| *o)
        .map_or(0, |o| o + 1);
    let hi = new_to_old[i + 1..]
        .iter()
        .find_map(|o| *o)
        .unwrap_or(old_len);
    (lo, hi)
}

/// The other direction of a diff's pairing: for each of the `old_len` old lines, its new line.
fn old_to_new(new_to_old: &[Option<usize>], old_len: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; old_len];
    for (n, o) in new_to_old.iter().enumerate() {
        if let Some(o) = o {
            out[*o] = Some(n);
        }
    }
    out
}

/// What of `post` can keep a deleted line of `pre`.
struct Kept<'a> {
    pre: &'a Text,
    post: &'a Text,
    /// The base's identifiers, once asked for.
    base_idents: Option<BTreeSet<String>>,
    /// Token strings of the lines the overlay's previous version deleted, with their counts.
    own: BTreeMap<Vec<Tok>, usize>,
    /// Token strings of `post`'s added lines, with their counts (moved or re-indented lines).
    moved: BTreeMap<Vec<Tok>, usize>,
    /// For each line of `pre`, its line in `post` when unchanged.
    pre_to_post: Vec<Option<usize>>,
    /// `post`'s added lines.
    added: BTreeSet<usize>,
}

impl<'a> Kept<'a> {
    fn new(q: &FileAudit<'a>, d: &crate::reverts::LineDiff) -> Kept<'a> {
        let pre_to_post = old_to_new(&d.new_to_old, q.pre.lines.len());
        Kept {
            pre: q.pre,
            post: q.post,
            base_idents: None,
            own: counts(q.own_removed.iter().map(|l| tokens(l))),
            moved: counts(d.added.iter().map(|&n| tokens(&q.post.lines[n]))),
            pre_to_post,
            added: d.added.iter().copied().collect(),
        }
    }

    /// Whether deleted line `i` of `pre` is kept by content (module doc); `renames_from`: the base,
    /// when the line may be kept under the base's identifiers.
    /// `was`: the base's line upstream changed this one from, and the base's lines: kept when the
    /// resolution's version of that line carries upstream's change ([`carries`]).
    fn keeps(
        &mut self,
        i: usize,
        renames_from: Option<&Text>,
        was: Option<(&Vec<Tok>, &BTreeSet<Vec<Tok>>)>,
    ) -> bool {
        let t = tokens(&self.pre.lines[i]);
        if t.is_empty() || take(&mut self.own, &t) || take(&mut self.moved, &t) {
            return true;
        }
        if let (Some(b), None) = (renames_from, &self.base_idents) {
            self.base_idents = Some(identifiers(b));
        }
        let base = renames_from.and(self.base_idents.as_ref());
        let hunk: Vec<Vec<Tok>> = self
            .hunk_of(i)
            .iter()
            .map(|&n| tokens(&self.post.lines[n]))
            .collect();
        // An extension of upstream's line that puts back what upstream removed from it, where
        // upstream removed it, does not keep it.
        let back = |r: &[Tok]| was.is_some_and(|(b, _)| puts_back(b, &t, r));
        if hunk
            .iter()
            .any(|r| (extends(&t, r) && !back(r)) || base.is_some_and(|b| renamed(&t, r, b)))
        {
            return true;
        }
        // Upstream's change may be carried only by the resolution's own version of the base's
        // line: of the added lines, the most like it. Another added line (a comment beside it)
        // replaced none of its words, and neither did a line the base has as it is (a line kept,
        // not a version of this one).
        let Some((b, base_lines)) = was else {
            return false;
        };
        let bw = words(b);
        let alike: Vec<usize> = hunk
            .iter()
            .map(|r| lcs_pairs(&bw, &words(r)).len())
            .collect();
        let best = alike.iter().copied().max().unwrap_or(0);
        hunk.iter()
            .zip(&alike)
            .any(|(r, &a)| a == best && !base_lines.contains(r) && carries(b, &t, r))
    }

    /// The added lines of `post` in the hunk that deletes line `i` of `pre`.
    fn hunk_of(&self, i: usize) -> Vec<usize> {
        let (lo, hi) = gap(&self.pre_to_post, i, self.post.lines.len());
        (lo..hi).filter(|n| self.added.contains(n)).collect()
    }
}

fn counts(it: impl Iterator<Item = Vec<Tok>>) -> BTreeMap<Vec<Tok>, usize> {
    let mut m = BTreeMap::new();
    for t in it.filter(|t| !t.is_empty()) {
        *m.entry(t).or_insert(0) += 1;
    }
    m
}

fn take(m: &mut BTreeMap<Vec<Tok>, usize>, t: &[Tok]) -> bool {
    match m.get_mut(t) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// Lines upstream deleted after the base (`gone`: removed, and no old version of a line it added
/// in their place; a changed line is a dropped one) that `post` keeps where the base had them, and
/// `pre` has nowhere; and the old version of a line upstream changed (`replaced`) kept where the
/// base had it beside its new version (a `both` resolution: the old line runs too, or twice).
fn resurrected(base: &Text, pre: &Text, post: &Text, u: &Upstream) -> Result<Vec<RawLoss>> {
    if u.gone.is_empty() && u.replaced.is_empty() {
        return Ok(Vec::new());
    }
    let in_pre: BTreeSet<Vec<Tok>> = pre.lines.iter().map(|l| tokens(l)).collect();
    let in_post: BTreeSet<Vec<Tok>> = post.lines.iter().map(|l| tokens(l)).collect();
    let d = line_diff(base, post)?;
    let mut out = Vec::new();
    for (n, o) in d.new_to_old.iter().enumerate() {
        let Some(o) = *o else { continue };
        let back = u.gone.contains(&o)
            || u.replaced
                .get(&o)
                .is_some_and(|&new| in_post.contains(&tokens(&pre.lines[new])));
        let t = tokens(&post.lines[n]);
        if !back || t.is_empty() || in_pre.contains(&t) {
            continue;
        }
        out.push(RawLoss {
            kind: LossKind::Resurrected,
            owner: Owner::Upstream(o),
            at: n,
            text: post.lines[n].clone(),
        });
    }
    Ok(out)
}

/// A token: its text, and whether it is an identifier.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tok {
    text: String,
    ident: bool,
}

/// A line's tokens, whitespace-insensitive: identifiers, numbers, string and character literals,
/// a `//` comment to the end of the line, and single punctuation characters.
pub fn tokens(line: &str) -> Vec<Tok> {
    let c: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let start = i;
        let ch = c[i];
        let ident = ch.is_alphabetic() || ch == '_';
        if ch.is_whitespace() {
            i += 1;
            continue;
        } else if ident || ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || (!ident && c[i] == '.'))
            {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            i = c.len();
        } else if ch == '"' || ch == '\'' {
            i += 1;
            while i < c.len() && c[i] != ch {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(c.len());
        } else {
            i += 1;
        }
        let text: String = c[start..i].iter().collect();
        let text = if text.starts_with("//") {
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        } else {
            text
        };
        out.push(Tok { text, ident });
    }
    out
}

/// `r` keeps every token of `t` in order and adds at most as many as `t` has.
fn extends(t: &[Tok], r: &[Tok]) -> bool {
    if r.len() > 2 * t.len() {
        return false;
    }
    let mut it = r.iter();
    t.iter().all(|x| it.any(|y| y == x))
}

/// The longest common subsequence of two token strings.
fn lcs(a: &[Tok], b: &[Tok]) -> Vec<Tok> {
    lcs_pairs(a, b)
        .into_iter()
        .map(|(i, _)| a[i].clone())
        .collect()
}

/// The longest common subsequence of two token strings, as pairs of positions (`a`'s, `b`'s).
fn lcs_pairs(a: &[Tok], b: &[Tok]) -> Vec<(usize, usize)> {
    let mut m = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            m[i][j] = if a[i] == b[j] {
                m[i + 1][j + 1] + 1
            } else {
                m[i + 1][j].max(m[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if m[i + 1][j] >= m[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// What turning `old` into `new` adds and removes, as tokens not in their common subsequence.
fn token_change(old: &[Tok], new: &[Tok]) -> (Vec<Tok>, Vec<Tok>) {
    let common = lcs(old, new);
    let rest = |v: &[Tok]| {
        let mut c = common.iter().peekable();
        v.iter()
            .filter(|t| {
                if c.peek() == Some(t) {
                    c.next();
                    false
                } else {
                    true
                }
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    (rest(new), rest(old))
}

/// `r` carries upstream's change `b -> t` (token strings): no token upstream removed is back
/// (beyond what `t` has), and each of upstream's edits (a run of words of `b` replaced, words
/// inserted) has its new words in `r`, except as many as the words of that run `r` replaced too
/// (both sides changed the same words: `r` may keep its own). Edit by edit, not in total: words
/// both sides removed in one place do not excuse upstream's words missing in another.
fn carries(b: &[Tok], t: &[Tok], r: &[Tok]) -> bool {
    if brings_back(b, t, r) {
        return false;
    }
    // Which of upstream's words are there, and which both sides replaced, word by word inside
    // literals and comments too ([`words`]).
    let (b, t, r) = (&words(b)[..], &words(t)[..], &words(r)[..]);
    // The words of `b` that `r` replaced with words of its own (not only deleted: a line the
    // resolution split in two deletes the tail it moved to the next line).
    let mut replaced_by_r = vec![false; b.len()];
    for (old, new) in edits(b, r) {
        if !new.is_empty() {
            replaced_by_r[old].fill(true);
        }
    }
    let mut pool = r.to_vec();
    let mut in_pool = |x: &Tok| match pool.iter().position(|y| y == x) {
        Some(p) => {
            pool.remove(p);
            true
        }
        None => false,
    };
    edits(b, t).into_iter().all(|(old, new)| {
        let missing = t[new].iter().filter(|x| !in_pool(x)).count();
        let replaced_by_both = old.filter(|&i| replaced_by_r[i]).count();
        missing <= replaced_by_both
    })
}

/// `r` has a token upstream's change `b -> t` removed, more times than `t` has it.
fn brings_back(b: &[Tok], t: &[Tok], r: &[Tok]) -> bool {
    let count = |v: &[Tok], x: &Tok| v.iter().filter(|y| *y == x).count();
    let (_, removed) = token_change(b, t);
    removed.iter().any(|x| count(r, x) > count(t, x))
}

/// `r`, an extension of `t`, adds a token upstream's change `b -> t` removed, at the place in `t`
/// where upstream removed it (`nb::ndarray<ro, c_contig>` over upstream's `nb::ndarray<ro>`,
/// which removed `, c_contig, cpu`).
fn puts_back(b: &[Tok], t: &[Tok], r: &[Tok]) -> bool {
    let ours = edits(t, r);
    edits(b, t).into_iter().any(|(old, new)| {
        ours.iter().any(|(at, added)| {
            at.start <= new.end
                && new.start <= at.end
                && r[added.clone()].iter().any(|x| b[old.clone()].contains(x))
        })
    })
}

/// The edits turning `a` into `b` (token strings): the runs between their common subsequence, as
/// the range of `a` replaced and the range of `b` in its place (either may be empty).
fn edits(a: &[Tok], b: &[Tok]) -> Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    let ends = [(a.len(), b.len())];
    for &(ni, nj) in lcs_pairs(a, b).iter().chain(&ends) {
        if ni > i || nj > j {
            out.push((i..ni, j..nj));
        }
        (i, j) = (ni + 1, nj + 1);
    }
    out
}

/// `t` with each string or character literal and each `//` comment opened into the words it
/// holds, between its delimiters: "the same words" means words, not a whole literal both sides
/// edited in different places (diffgit --resolutions found a signature string whose `dtype`
/// parameter both sides added, where keeping the fork's string threw away upstream's
/// `StreamOrDevice` in it).
fn words(t: &[Tok]) -> Vec<Tok> {
    let mut out = Vec::with_capacity(t.len());
    for x in t {
        let (open, inner, close) = if let Some(rest) = x.text.strip_prefix("//") {
            ("//", rest, "")
        } else if x.text.len() >= 2 && (x.text.starts_with('"') || x.text.starts_with('\'')) {
            let q = &x.text[..1];
            (q, &x.text[1..x.text.len() - 1], q)
        } else {
            out.push(x.clone());
            continue;
        };
        let delim = |s: &str| Tok {
            text: s.to_string(),
            ident: false,
        };
        out.push(delim(open));
        out.extend(tokens(inner));
        if !close.is_empty() {
            out.push(delim(close));
        }
    }
    out
}

/// `r` is `t` with some identifiers replaced by identifiers `base` has.
fn renamed(t: &[Tok], r: &[Tok], base: &BTreeSet<String>) -> bool {
    t.len() == r.len()
        && t.iter().zip(r).all(|(a, b)| {
            a == b || (a.ident && b.ident && base.contains(&b.text) && !b.text.is_empty())
        })
}

fn identifiers(text: &Text) -> BTreeSet<String> {
    text.lines
        .iter()
        .flat_map(|l| tokens(l))
        .filter(|t| t.ident)
        .map(|t| t.text)
        .collect()
}

/// One new version of an overlay, as trees: `pre` is `pin` with the `earlier` overlays applied.
pub struct OverlayAudit<'a> {
    /// Upstream at the pin the new version is written at.
    pub pin: &'a Tree,
    /// The earlier overlays of the series, as they apply at that pin.
    pub earlier: &'a [Overlay],
    /// The overlay's result.
    pub post: &'a Tree,
    /// The previous version's `pre` and `post` (a bump's old chain), whose deletions are the
    /// overlay's own decisions.
    pub previous: Option<(&'a Tree, &'a Tree)>,
    /// The files to audit.
    pub paths: &'a BTreeSet<String>,
}

/// The raw losses of each audited file (only files with losses), in path order; `base_text`
/// gives a file's base (module doc) — for a bump, the previous version's `pre`.
pub fn audit_overlay(
    a: &OverlayAudit<'_>,
    src: &dyn BlobSource,
    base_text: &dyn Fn(&str) -> Result<Option<Text>>,
) -> Result<Vec<(String, Vec<RawLoss>)>> {
    let mut chain = vec![a.pin.clone()];
    for ov in a.earlier {
        let mut next = chain.last().expect("the pin").clone();
        next.apply_overlay(ov, src)?;
        chain.push(next);
    }
    let mut out = Vec::new();
    for path in a.paths {
        let text = |t: &Tree| text_of(t, Some(path), src);
        let post = text(a.post)?;
        let pre = text(chain.last().expect("the pin"))?;
        if pre == post {
            continue;
        }
        let texts: Vec<Text> = chain.iter().map(text).collect::<Result<_>>()?;
        let steps: Vec<(&str, &Text)> = a
            .earlier
            .iter()
            .zip(&texts[1..])
            .map(|(o, t)| (o.name.as_str(), t))
            .collect();
        let own = owners(&texts[0], &steps)?;
        let own_removed = match a.previous {
            Some((before, after)) => removed_lines(&text(before)?, &text(after)?)?,
            None => Vec::new(),
        };
        let base = base_text(path)?;
        let raw = audit_file(&FileAudit {
            path,
            base: base.as_ref(),
            pre: &pre,
            owners: &own,
            post: &post,
            own_removed: &own_removed,
        })?;
        if !raw.is_empty() {
            out.push((path.clone(), raw));
        }
    }
    Ok(out)
}

fn removed_lines(before: &Text, after: &Text) -> Result<Vec<String>> {
    Ok(line_diff(before, after)?
        .removed
        .into_iter()
        .map(|i| before.lines[i].clone())
        .collect())
}

/// Where a file's upstream lines come from: the commits between `base` and `pin`.
pub struct History<'a> {
    /// The upstream repository.
    pub repo: &'a git2::Repository,
    /// The commit the overlay's base is at.
    pub base: git2::Oid,
    /// The pin.
    pub pin: git2::Oid,
}

/// Names each raw loss of `path`'s origin: an earlier overlay, or the upstream commit that added
/// (blame, first parents, `base..pin`) or deleted the line; `history` is `None` when the texts are
/// not at upstream commits (then upstream lines have no commit).
pub fn attribute(
    history: Option<&History<'_>>,
    path: &str,
    raw: &[RawLoss],
    confirmed: &Confirmed,
) -> Result<Vec<Loss>> {
    let pin_lines: Vec<usize> = raw
        .iter()
        .filter(|r| r.kind == LossKind::Dropped)
        .filter_map(|r| match r.owner {
            Owner::Upstream(l) => Some(l),
            Owner::Overlay(_) => None,
        })
        .collect();
    let blamed: BTreeMap<usize, Option<git2::Oid>> = match (history, pin_lines.is_empty()) {
        (Some(h), false) => pin_lines
            .iter()
            .copied()
            .zip(crate::reverts::blame_between(
                h.repo, path, h.base, h.pin, &pin_lines,
            )?)
            .collect(),
        _ => BTreeMap::new(),
    };
    let mut out = Vec::new();
    for r in raw {
        let (origin, accepted) = match (&r.owner, r.kind) {
            (Owner::Overlay(name), _) => (
                Origin::Overlay { name: name.clone() },
                confirmed.overlays.contains(name),
            ),
            (Owner::Upstream(l), LossKind::Dropped) => {
                upstream_origin(history, blamed.get(l).copied().flatten(), confirmed)
            }
            (Owner::Upstream(_), LossKind::Resurrected) => {
                let c = match history {
                    Some(h) => deleted_by(h, path, &r.text)?,
                    None => None,
                };
                upstream_origin(history, c, confirmed)
            }
        };
        out.push(Loss {
            file: path.to_string(),
            kind: r.kind,
            origin,
            line: r.at + 1,
            text: r.text.clone(),
            accepted,
        });
    }
    Ok(out)
}

fn upstream_origin(
    history: Option<&History<'_>>,
    commit: Option<git2::Oid>,
    confirmed: &Confirmed,
) -> (Origin, bool) {
    let subject = match (history, commit) {
        (Some(h), Some(c)) => h
            .repo
            .find_commit(c)
            .ok()
            .and_then(|c| c.summary().ok().flatten().map(str::to_string))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let accepted = commit
        .or(history.map(|h| h.base))
        .is_some_and(|c| confirmed.commits.contains(&c));
    (
        Origin::Upstream {
            commit: commit.map(|c| c.to_string()),
            subject,
        },
        accepted,
    )
}

/// The first-parent commit in `base..pin` after which `path` no longer has `line` (by tokens).
fn deleted_by(h: &History<'_>, path: &str, line: &str) -> Result<Option<git2::Oid>> {
    let want = tokens(line);
    let has = |c: git2::Oid| -> Result<bool> {
        Ok(crate::reverts::text_at(h.repo, c, path)?
            .is_some_and(|t| t.lines.iter().any(|l| tokens(l) == want)))
    };
    let mut walk = h
        .repo
        .revwalk()
        .map_err(|e| crate::Error::git("walking the upstream history", e))?;
    walk.simplify_first_parent()
        .and_then(|_| walk.push(h.pin))
        .and_then(|_| walk.hide(h.base))
        .map_err(|e| crate::Error::git("walking the upstream history", e))?;
    let commits: Vec<git2::Oid> = walk.filter_map(|c| c.ok()).collect();
    let mut present = has(h.base)?;
    for c in commits.into_iter().rev() {
        let now = has(c)?;
        if present && !now {
            return Ok(Some(c));
        }
        present = now;
    }
    Ok(None)
}

/// One line for a report: which line, whose, what happened to it.
pub fn describe(l: &Loss) -> String {
    let whose = match &l.origin {
        Origin::Overlay { name } => format!("overlay {name}"),
        Origin::Upstream {
            commit: Some(c),
            subject,
        } => format!("upstream {} \"{subject}\"", &c[..12.min(c.len())]),
        Origin::Upstream { commit: None, .. } => "upstream".to_string(),
    };
    let what = match (l.kind, &l.origin) {
        (LossKind::Dropped, Origin::Overlay { .. }) => "drops a line added by",
        (LossKind::Dropped, Origin::Upstream { .. }) => "drops a line added or changed by",
        (LossKind::Resurrected, _) => "brings back a line deleted by",
    };
    format!("{}:{}: {what} {whose}: `{}`", l.file, l.line, l.text.trim())
}

/// The losses as runs for a report: consecutive lines of one file with the same kind and origin
/// (blank lines between them, which are not audited, do not break a run), one line each, with the
/// run's first loss.
pub fn summarize<'a>(losses: &[&'a Loss]) -> Vec<(String, &'a Loss)> {
    let mut runs: Vec<(&'a Loss, &'a Loss, usize)> = Vec::new();
    for l in losses {
        if let Some((first, last, n)) = runs.last_mut()
            && first.file == l.file
            && first.kind == l.kind
            && first.origin == l.origin
            && l.line > last.line
            && l.line - last.line <= 2
        {
            *last = l;
            *n += 1;
            continue;
        }
        runs.push((l, l, 1));
    }
    runs.iter()
        .map(|(first, last, n)| {
            if *n == 1 {
                return (describe(first), *first);
            }
            let d = describe(first);
            let (_, rest) = d.split_once(": ").unwrap_or(("", &d));
            let rest = rest.replacen("a line", &format!("{n} lines"), 1);
            let m = format!("{}:{}-{}: {rest} …", first.file, first.line, last.line);
            (m, *first)
        })
        .collect()
}

/// The trailers that confirm `losses` (`Reverts-Upstream: <commit>` for upstream's lines with a
/// commit, `Reverts-Overlay: <name>` for earlier overlays'), each once, in order; `base` names
/// upstream lines without a commit.
pub fn confirming_trailers(losses: &[Loss], base: git2::Oid) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in losses {
        let t = match &l.origin {
            Origin::Overlay { name } => format!("{ACCEPT_OVERLAY_TRAILER}: {name}"),
            Origin::Upstream { commit, .. } => format!(
                "{}: {}",
                crate::reverts::ACCEPT_TRAILER,
                commit.clone().unwrap_or_else(|| base.to_string())
            ),
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// `raw` (an overlay's text) with `trailers` appended to its trailer paragraph (those it lacks).
pub fn add_trailers(raw: &str, trailers: &[String]) -> String {
    let Some(end) = raw.find("\n---\n") else {
        return raw.to_string();
    };
    let (head, rest) = raw.split_at(end + 1);
    let mut s = head.to_string();
    for t in trailers {
        if !head.lines().any(|l| l == t) {
            s.push_str(t);
            s.push('\n');
        }
    }
    s + rest
}

/// `base` when it is an older commit than `pin` (an ancestor of it): a copy made at the pin or
/// ahead of it carries upstream's work and reverts none of it.
pub fn older_base(repo: &git2::Repository, base: git2::Oid, pin: git2::Oid) -> Option<git2::Oid> {
    (base != pin && repo.graph_descendant_of(pin, base).unwrap_or(false)).then_some(base)
}

/// `check`'s audit of a series at `pin`: each overlay over the earlier ones, the lines of earlier
/// overlays it drops (confirmed by `Reverts-Overlay:`) and, for an overlay with a `Base:`, the
/// lines upstream deleted after it that it brings back (`Reverts-Upstream:`). Upstream lines an
/// overlay drops are `reverts`' (`REVERTS`), not repeated here. Stops at the first overlay that
/// does not apply (check's CONFLICT).
pub fn series_findings(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    pin: git2::Oid,
    series: &crate::series::Series,
) -> Result<Vec<crate::check::Finding>> {
    Ok(series_losses(repo, src, pin, series)?
        .iter()
        .map(|s| finding(&s.overlay, &s.path, &s.message, &s.loss))
        .collect())
}

/// One run of lines an overlay of a series loses that it has not confirmed ([`series_losses`]).
#[derive(Debug, Clone)]
pub struct SeriesLoss {
    /// The overlay's file name.
    pub overlay: String,
    /// The file the lines are in.
    pub path: String,
    /// The run, described ([`summarize`]).
    pub message: String,
    /// The run's first loss.
    pub loss: Loss,
}

/// What [`series_findings`] reports, as runs of losses with their overlay.
pub fn series_losses(
    repo: &git2::Repository,
    src: &dyn BlobSource,
    pin: git2::Oid,
    series: &crate::series::Series,
) -> Result<Vec<SeriesLoss>> {
    let pin_tree = crate::upstream::tree_of_commit(repo, pin)?;
    let mut post = pin_tree.clone();
    let mut out = Vec::new();
    for (i, ov) in series.overlays.iter().enumerate() {
        if post.apply_overlay(ov, src).is_err() {
            break;
        }
        let rec = crate::reverts::recorded(ov)?;
        let paths: BTreeSet<String> = ov.touched_paths().collect();
        let base_text = |p: &str| -> Result<Option<Text>> {
            let b = rec.base_for(p).filter(|b| repo.find_commit(*b).is_ok());
            match b.and_then(|b| older_base(repo, b, pin)) {
                Some(b) => Ok(Some(
                    crate::reverts::text_at(repo, b, p)?.unwrap_or_else(|| Text::parse("")),
                )),
                _ => Ok(None),
            }
        };
        let a = OverlayAudit {
            pin: &pin_tree,
            earlier: &series.overlays[..i],
            post: &post,
            previous: None,
            paths: &paths,
        };
        for (path, raw) in audit_overlay(&a, src, &base_text)? {
            let raw: Vec<RawLoss> = raw
                .into_iter()
                .filter(|r| r.kind == LossKind::Resurrected || matches!(r.owner, Owner::Overlay(_)))
                .collect();
            let history = rec.base_for(&path).map(|base| History { repo, base, pin });
            let losses = attribute(history.as_ref(), &path, &raw, &rec.confirmed())?;
            let open: Vec<&Loss> = losses.iter().filter(|l| !l.accepted).collect();
            out.extend(summarize(&open).into_iter().map(|(m, l)| SeriesLoss {
                overlay: ov.name.clone(),
                path: path.clone(),
                message: m,
                loss: l.clone(),
            }));
        }
    }
    Ok(out)
}

fn finding(overlay: &str, path: &str, message: &str, l: &Loss) -> crate::check::Finding {
    let confirm = match &l.origin {
        Origin::Overlay { name } => format!("\"{ACCEPT_OVERLAY_TRAILER}: {name}\""),
        Origin::Upstream { commit, .. } => format!(
            "\"{}: {}\"",
            crate::reverts::ACCEPT_TRAILER,
            commit.as_deref().unwrap_or("<the base>")
        ),
    };
    crate::check::Finding {
        overlay: overlay.to_string(),
        kind: crate::check::FindingKind::Drops,
        file: Some(path.to_string()),
        hunk: None,
        patch_line: None,
        message: {
            let at = message.strip_prefix(&format!("{path}:")).unwrap_or(message);
            let line = if at.split(':').next().is_some_and(|r| r.contains('-')) {
                "lines"
            } else {
                "line"
            };
            format!(
                "{line} {at}; restore them, or confirm with {confirm} in the overlay's trailers"
            )
            .into()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Text {
        Text::parse(s)
    }

    /// Audits `post` over `pre` (upstream's own at the pin, `base` its base), no earlier overlay.
    fn upstream_losses(base: &str, pre: &str, post: &str, own: &[&str]) -> Vec<String> {
        let (b, p, q) = (t(base), t(pre), t(post));
        let owners: Vec<Owner> = (0..p.lines.len()).map(Owner::Upstream).collect();
        let own: Vec<String> = own.iter().map(|s| s.to_string()).collect();
        let q = FileAudit {
            path: "f.c",
            base: Some(&b),
            pre: &p,
            owners: &owners,
            post: &q,
            own_removed: &own,
        };
        audit_file(&q)
            .unwrap()
            .into_iter()
            .map(|l| format!("{:?} {}", l.kind, l.text.trim()))
            .collect()
    }

    #[test]
    fn an_ours_resolution_drops_upstreams_change_a_redo_keeps_it() {
        let base = "#define V 1\nint x;\n";
        let pre = "#define V 2\nint x;\n";
        let own = ["#define V 1"];
        assert_eq!(
            upstream_losses(base, pre, "#define V 1 // fork\nint x;\n", &own),
            ["Dropped #define V 2"]
        );
        assert!(upstream_losses(base, pre, "#define V 2 // fork\nint x;\n", &own).is_empty());
        // Both sides changed the same word: the resolution may keep its own and upstream's rest.
        let (b2, p2) = ("x = l10;\n", "x = ten + up;\n");
        assert!(upstream_losses(b2, p2, "x = TEN + up;\n", &["x = l10;"]).is_empty());
        // Upstream's removed word back, or its added word gone while the fork changed none: lost.
        assert_eq!(
            upstream_losses(b2, p2, "x = l10 + up;\n", &[]),
            ["Dropped x = ten + up;"]
        );
        assert_eq!(
            upstream_losses(
                "x = l10 + 1;\n",
                "x = ten + 1;\n",
                "x = l10 + 1; // f\n",
                &[]
            ),
            ["Dropped x = ten + 1;"]
        );
        // Keeping every line (additions only) is silent.
        assert!(upstream_losses(base, pre, "#define V 2\n// fork\nint x;\n", &[]).is_empty());
        // Inside a string literal both sides edited, words count, not the whole literal: the
        // fork's string drops upstream's other edit in it; keeping both edits is kept.
        let (b3, p3) = (
            "s = \"f(a, *, s: Union[A, B])\";\n",
            "s = \"f(a, d: D, *, s: AB)\";\n",
        );
        let own3 = ["s = \"f(a, *, s: Union[A, B])\";"];
        assert_eq!(
            upstream_losses(
                b3,
                p3,
                "s = \"f(a, d: Opt[D], *, s: Union[A, B])\";\n",
                &own3
            ),
            ["Dropped s = \"f(a, d: D, *, s: AB)\";"]
        );
        assert!(upstream_losses(b3, p3, "s = \"f(a, d: Opt[D], *, s: AB)\";\n", &own3).is_empty());
    }

    /// "Both sides replaced the same words" is about one line and its own new version: a line
    /// upstream split (or a line it added next to the one it changed) is no changed version of
    /// the base's line, and a line the resolution adds beside its own version of it (a comment)
    /// replaced none of its words (d04e5dbff8 onto 846d176, found by diffgit --resolutions).
    #[test]
    fn a_line_upstream_split_is_not_waived_by_the_overlays_rewrite_of_it() {
        // d04e5dbff8: upstream split the condition into `bool has_nax_kernel = ...;` and an `if`
        // on it; the overlay rewrote the same `if` (and commented it). Taking the overlay's side
        // drops upstream's new lines.
        let base = "  if (metal::is_nax_available() && transpose && (K % 64 == 0) &&\n      (env::enable_tf32() || x.dtype() != float32)) {\n    return qmm_nax();\n  }\n";
        let pre = "  bool has_nax_kernel =\n      metal::is_nax_available() && (transpose || mode == \"affine\");\n  if (has_nax_kernel && transpose && (K % 64 == 0) &&\n      (env::enable_tf32() || x.dtype() != float32)) {\n    return qmm_nax();\n  }\n";
        let ours = "  // The non-transposed kernel requires N % 64 == 0.\n  if (metal::is_nax_available() && (transpose || (N % 64 == 0)) &&\n      (K % 64 == 0) && (env::enable_tf32() || x.dtype() != float32)) {\n    return qmm_nax();\n  }\n";
        let own = [
            "  if (metal::is_nax_available() && transpose && (K % 64 == 0) &&",
            "      (env::enable_tf32() || x.dtype() != float32)) {",
        ];
        assert_eq!(
            upstream_losses(base, pre, ours, &own),
            [
                "Dropped bool has_nax_kernel =",
                "Dropped metal::is_nax_available() && (transpose || mode == \"affine\");",
                "Dropped if (has_nax_kernel && transpose && (K % 64 == 0) &&",
            ]
        );
        // Keeping upstream's lines and redoing the overlay's change on them is kept.
        let redo = "  // The non-transposed kernel requires N % 64 == 0.\n  bool has_nax_kernel =\n      metal::is_nax_available() && (transpose || mode == \"affine\");\n  if (has_nax_kernel && (transpose || (N % 64 == 0)) && (K % 64 == 0) &&\n      (env::enable_tf32() || x.dtype() != float32)) {\n    return qmm_nax();\n  }\n";
        assert!(upstream_losses(base, pre, redo, &own).is_empty());
        // A line upstream added next to the one it changed, where the overlay changed the same
        // words of that one: the overlay's words may win, the new line may not go.
        let (b, p) = ("x = a;\n", "x = b;\ny = 1;\n");
        assert_eq!(
            upstream_losses(b, p, "z = c;\n", &["x = a;"]),
            ["Dropped y = 1;"]
        );
        assert!(upstream_losses(b, p, "x = c;\ny = 1;\n", &["x = a;"]).is_empty());
        // A comment the resolution adds beside its own version of the line replaced none of the
        // line's words: upstream's `b` is lost where the overlay kept `a`.
        assert_eq!(
            upstream_losses(
                "x = a + 1;\n",
                "x = b + 1;\n",
                "// bump\nx = a + 2;\n",
                &["x = a + 1;"]
            ),
            ["Dropped x = b + 1;"]
        );
        // Nor did the second half of the line where the overlay split it.
        assert_eq!(
            upstream_losses(
                "if (a && b && c) {\n",
                "if (a && B && c) {\n",
                "if (a && b &&\n    C) {\n",
                &[]
            ),
            ["Dropped if (a && B && c) {"]
        );
        // Nor did the first half, which only lost its tail to the next line: the overlay's split
        // of the line keeps the `b` upstream replaced.
        assert_eq!(
            upstream_losses("f(a, b);\n", "f(a, B);\n", "f(a,\n  b);\n", &[]),
            ["Dropped f(a, B);"]
        );
    }

    /// Each of upstream's edits in a line is carried or overridden on its own: the words both
    /// sides removed in one place do not excuse upstream's words missing in another
    /// (7ab9dd9745: both dropped a test filter, upstream also moved the binary).
    #[test]
    fn upstreams_edits_in_a_line_are_carried_one_by_one() {
        let (b, p) = ("call(x, y, z);\n", "call(w, x, y);\n");
        assert_eq!(
            upstream_losses(b, p, "call(x, y);\n", &["call(x, y, z);"]),
            ["Dropped call(w, x, y);"]
        );
        assert!(upstream_losses(b, p, "call(w, x, y); // f\n", &[]).is_empty());
        // The same word replaced by both is still the overlay's to keep.
        assert!(
            upstream_losses(
                "call(x, y, z);\n",
                "call(x, y, w);\n",
                "call(x, y, v);\n",
                &[]
            )
            .is_empty()
        );
    }

    /// A resolution's line that the base has as it is was not rewritten: it replaced no word of
    /// another line upstream changed (520cea2bec, version.h bumps: the overlay's side keeps the
    /// base's line beside its own version of another one).
    #[test]
    fn a_line_kept_from_the_base_is_no_version_of_another() {
        let (b, p) = (
            "#define MINOR 31\n#define PATCH 0\n",
            "#define MINOR 32\n#define PATCH 2\n",
        );
        // Both bumped PATCH (the overlay's may win); only upstream bumped MINOR.
        assert_eq!(
            upstream_losses(
                b,
                p,
                "#define MINOR 31\n#define PATCH 1\n",
                &["#define PATCH 0"]
            ),
            ["Dropped #define MINOR 32"]
        );
        assert!(
            upstream_losses(
                b,
                p,
                "#define MINOR 32\n#define PATCH 1\n",
                &["#define PATCH 0"]
            )
            .is_empty()
        );
        let base = "  // The event pool goes after the device.\n  cu::init_pool();\n}\n\nvoid new_stream(Stream s) {\n  // The handles go after the encoder.\n  run(s);\n}\n";
        let pre =
            "  // Native resources go after the encoder.\n  mlx::cu::init_pool();\n  run(s);\n}\n";
        let ours = "  // The event pool goes after the device.\n  mlx::cu::init_pool();\n}\n\nvoid new_stream(Stream s) {\n  // The handles go after the encoder.\n  run(s);\n}\n";
        assert_eq!(
            upstream_losses(base, pre, ours, &["  cu::init_pool();"]),
            [
                "Dropped // Native resources go after the encoder.",
                "Resurrected // The event pool goes after the device.",
                "Resurrected void new_stream(Stream s) {",
            ]
        );
    }

    /// A new line that shares less than half of the shorter with every line its hunk removed is
    /// no version of any (0bdbfdb838: both sides rewrote a signature, the overlay's `array in`
    /// dropped upstream's `const array& in`).
    #[test]
    fn a_region_both_sides_rewrote_has_no_changed_lines() {
        let base = "void f(const std::vector<array>& inputs, array& out) {\n  auto in = inputs[0];\n  use(in);\n";
        let pre = "void g(\n    const array& in,\n    array& out) {\n  use(in);\n";
        let ours = "void g(\n    array in,\n    array& out) {\n  use(in);\n";
        let own = [
            "void f(const std::vector<array>& inputs, array& out) {",
            "  auto in = inputs[0];",
        ];
        assert_eq!(
            upstream_losses(base, pre, ours, &own),
            ["Dropped const array& in,"]
        );
        // One line replaced by one line is changed, whatever the two share: both sides replaced
        // the same words, the overlay's may stay.
        assert!(upstream_losses("10\n", "ten upstream\n", "TEN upstream\n", &["10"]).is_empty());
    }

    /// An extension of upstream's line is no keeping it where it puts back, in place, what
    /// upstream removed from the line (933a4a77aa).
    #[test]
    fn an_extension_that_puts_back_what_upstream_removed_drops_the_line() {
        let b = "    nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>,\n";
        let p = "    nb::ndarray<nb::ro>,\n";
        assert_eq!(
            upstream_losses(
                b,
                p,
                "    nb::ndarray<nb::ro, nb::c_contig>,\n",
                &[b.trim_end()]
            ),
            ["Dropped nb::ndarray<nb::ro>,"]
        );
        assert!(upstream_losses(b, p, "    nb::ndarray<nb::ro>, // f\n", &[]).is_empty());
    }

    /// A line upstream deleted in a hunk where it changed another is deleted, not changed: kept
    /// where the base had it, it is brought back (046217bcae, be52cf660b).
    #[test]
    fn a_line_deleted_beside_a_changed_one_is_resurrected() {
        let base = "  echo \"::group::Distributed tests\"\n  mlx.launch -n 8 tests.py -v\n";
        let pre = "  mlx.launch -n 8 python tests.py -v\n";
        let ours = "  echo \"::group::Distributed tests\"\n  mlx.launch -n 8 python tests.py -v\n";
        assert_eq!(
            upstream_losses(base, pre, ours, &["  mlx.launch -n 8 tests.py -v"]),
            ["Resurrected echo \"::group::Distributed tests\""]
        );
        // A line replaced by one it shares no word with, kept beside it: brought back too.
        assert_eq!(
            upstream_losses(
                "  echo \"::endgroup::\"\n",
                "  sysctl -a | grep cpu\n",
                "  sysctl -a | grep cpu\n  echo \"::endgroup::\"\n",
                &[]
            ),
            ["Resurrected echo \"::endgroup::\""]
        );
    }

    #[test]
    fn lines_moved_or_reindented_into_a_lambda_are_kept() {
        let base = "void f() {\n}\n";
        let pre = "void f() {\n  check(a);\n  run(a);\n}\n";
        let post = "void f() {\n  auto g = [&]() {\n    check(a);\n    run(a);\n  };\n  g();\n}\n";
        assert!(upstream_losses(base, pre, post, &[]).is_empty());
        // Dropping one of them is named.
        let post = "void f() {\n  auto g = [&]() {\n    run(a);\n  };\n  g();\n}\n";
        assert_eq!(upstream_losses(base, pre, post, &[]), ["Dropped check(a);"]);
    }

    #[test]
    fn a_guard_upstream_added_is_kept_under_the_bases_older_names() {
        let base = "int f(int in) {\n  int y = in * 2;\n  log(y);\n  return y;\n}\n";
        let pre =
            "int f(int x) {\n  int y = x * 2;\n  log(y);\n  if (x < 0) return 0;\n  return y;\n}\n";
        let post = "int f(int in) {\n  int y = in * 2;\n  log(y);\n  if (in < 0) return 0;\n  return y;\n}\n";
        // The guard upstream added is kept (under `in`, a name the base has); the lines upstream
        // changed (its rename) are undone by the copy: named.
        assert_eq!(
            upstream_losses(base, pre, post, &[]),
            ["Dropped int f(int x) {", "Dropped int y = x * 2;"]
        );
        // A name the base never had is no "older name": the guard is dropped.
        let post =
            "int f(int x) {\n  int y = x * 2;\n  log(y);\n  if (z < 0) return 0;\n  return y;\n}\n";
        assert_eq!(
            upstream_losses(base, pre, post, &[]),
            ["Dropped if (x < 0) return 0;"]
        );
    }

    #[test]
    fn lines_upstream_deleted_are_resurrected_when_kept_in_place() {
        let base = "a();\nold_guard();\nb();\n";
        let pre = "a();\nb();\n";
        assert_eq!(
            upstream_losses(base, pre, "a(); // fork\nold_guard();\nb();\n", &[]),
            ["Resurrected old_guard();"]
        );
        assert!(upstream_losses(base, pre, "a(); // fork\nb();\n", &[]).is_empty());
    }

    /// A `both` resolution keeps the old version of a line upstream changed beside its new one
    /// (2542e08b97: `return mx::int32;` after upstream's ternary): the old line is brought back.
    /// Kept alone in place of the new one, it is the new line that is dropped (one loss, not
    /// two); the overlay's own version of the line beside upstream's is no old version.
    #[test]
    fn the_old_version_of_a_changed_line_kept_beside_the_new_is_brought_back() {
        let base = "f() {\n  return mx::int32;\n}\n";
        let pre = "f() {\n  return wide ? mx::int64 : mx::int32;\n}\n";
        let both = "f() {\n  return wide ? mx::int64 : mx::int32;\n  return mx::int32;\n}\n";
        assert_eq!(
            upstream_losses(base, pre, both, &[]),
            ["Resurrected return mx::int32;"]
        );
        let ours = "f() {\n  return mx::int32;\n}\n";
        assert_eq!(
            upstream_losses(base, pre, ours, &[]),
            ["Dropped return wide ? mx::int64 : mx::int32;"]
        );
        let mine =
            "f() {\n  return wide ? mx::int64 : mx::int32;\n  return mx::uint32; // fork\n}\n";
        assert!(upstream_losses(base, pre, mine, &[]).is_empty());
    }

    #[test]
    fn an_earlier_overlays_lines_are_protected_and_their_owner_named() {
        let pin = t("a\nb\n");
        let ov1 = t("a\nmine1\nmine2\nb\n");
        let own = owners(&pin, &[("0001-x.patch", &ov1)]).unwrap();
        assert_eq!(own[1], Owner::Overlay("0001-x.patch".into()));
        assert_eq!(own[3], Owner::Upstream(1));
        let post = t("a\nmine1\nb // fork\n");
        let q = FileAudit {
            path: "f",
            base: None,
            pre: &ov1,
            owners: &own,
            post: &post,
            own_removed: &[],
        };
        let raw = audit_file(&q).unwrap();
        let losses = attribute(None, "f", &raw, &Confirmed::default()).unwrap();
        assert_eq!(losses.len(), 1, "{losses:?}");
        assert_eq!(
            describe(&losses[0]),
            "f:3: drops a line added by overlay 0001-x.patch: `mine2`"
        );
        assert_eq!(
            confirming_trailers(&losses, git2::Oid::ZERO_SHA1),
            ["Reverts-Overlay: 0001-x.patch"]
        );
        let confirmed = Confirmed {
            overlays: ["0001-x.patch".to_string()].into(),
            ..Confirmed::default()
        };
        assert!(attribute(None, "f", &raw, &confirmed).unwrap()[0].accepted);
    }

    #[test]
    fn trailers_go_into_the_trailer_paragraph_once() {
        let raw = "Subject: x\n\nWhy.\n\nOverlay-Kind: local-only\n---\n f | 1 +\n";
        let t = vec!["Reverts-Overlay: 0001-x.patch".to_string()];
        let once = add_trailers(raw, &t);
        assert_eq!(
            once,
            "Subject: x\n\nWhy.\n\nOverlay-Kind: local-only\nReverts-Overlay: 0001-x.patch\n---\n f | 1 +\n"
        );
        assert_eq!(add_trailers(&once, &t), once);
    }
}
