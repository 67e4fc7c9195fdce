//! Upstream's renames between two commits, found by git's rule (`git diff -M`, the rename
//! detection of git's merge): exact renames first (same blob), then a moved file whose name is
//! unique on both sides at 75% similarity, then the best pairs at git's default 50%, each file
//! paired once. The similarity is git's (`diffcore-delta`): both files cut into chunks ending at a
//! newline or after 64 bytes, hashed, and the bytes of the chunks both hold counted against the
//! larger file. libgit2's own score (`find_similar`) pairs files git does not, so it is not used.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};

/// git's `MAX_SCORE`: 100% similarity.
const MAX_SCORE: u64 = 60_000;
/// git's default `-M50%` (merge-ort uses it too).
const MIN_SCORE: u64 = MAX_SCORE / 2;
/// git's basename pass: halfway between the minimum and 100%.
const BASENAME_SCORE: u64 = MIN_SCORE + (MAX_SCORE - MIN_SCORE) / 2;
/// git keeps this many candidate sources per destination.
const CANDIDATES_PER_DST: usize = 4;
/// git's span hash modulus.
const HASHBASE: u32 = 107_927;

/// A deleted or added file of the diff between the two commits.
struct Side {
    path: String,
    id: git2::Oid,
    mode: u32,
}

impl Side {
    fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
    fn is_regular(&self) -> bool {
        self.mode & 0o170000 == 0o100000
    }
}

/// Upstream's renames from `from` to `to` of those `paths` that no longer exist at `to`, old path
/// -> new path, as git finds them (the module's rule). Empty, at no cost, when every path is
/// still there.
pub fn upstream_renames(
    repo: &git2::Repository,
    from: git2::Oid,
    to: git2::Oid,
    paths: &[String],
) -> Result<BTreeMap<String, String>> {
    let tree = |c: git2::Oid| {
        repo.find_commit(c)
            .and_then(|c| c.tree())
            .map_err(|e| Error::git(format!("reading the tree of {c}"), e))
    };
    let (a, b) = (tree(from)?, tree(to)?);
    let at = |t: &git2::Tree, p: &str| t.get_path(std::path::Path::new(p)).is_ok();
    let gone: Vec<&String> = paths.iter().filter(|p| at(&a, p) && !at(&b, p)).collect();
    if gone.is_empty() {
        return Ok(BTreeMap::new());
    }
    let diff = repo
        .diff_tree_to_tree(Some(&a), Some(&b), None)
        .map_err(|e| Error::git("comparing upstream trees", e))?;
    let (mut deleted, mut added) = (Vec::new(), Vec::new());
    for d in diff.deltas() {
        let (list, file) = match d.status() {
            git2::Delta::Deleted => (&mut deleted, d.old_file()),
            git2::Delta::Added => (&mut added, d.new_file()),
            _ => continue,
        };
        if let Some(p) = file.path() {
            list.push(Side {
                path: p.to_string_lossy().into_owned(),
                id: file.id(),
                mode: u32::from(file.mode()),
            });
        }
    }
    let relevant: Vec<usize> = (0..deleted.len())
        .filter(|&i| gone.iter().any(|g| **g == deleted[i].path))
        .collect();
    let mut pairing = Pairing::new(repo, &deleted, &added);
    pairing.exact()?;
    pairing.by_basename(&relevant)?;
    pairing.by_score(&relevant)?;
    Ok(relevant
        .iter()
        .filter_map(|&s| {
            pairing
                .dst_of(s)
                .map(|d| (deleted[s].path.clone(), added[d].path.clone()))
        })
        .collect())
}

/// The pairing of deleted sources with added destinations, pass by pass.
struct Pairing<'a> {
    repo: &'a git2::Repository,
    src: &'a [Side],
    dst: &'a [Side],
    /// For each destination, the source it was paired with.
    paired: Vec<Option<usize>>,
    used: Vec<bool>,
    blobs: HashMap<git2::Oid, (u64, Option<HashMap<u32, u64>>)>,
}

impl<'a> Pairing<'a> {
    fn new(repo: &'a git2::Repository, src: &'a [Side], dst: &'a [Side]) -> Self {
        Pairing {
            repo,
            src,
            dst,
            paired: vec![None; dst.len()],
            used: vec![false; src.len()],
            blobs: HashMap::new(),
        }
    }

    fn dst_of(&self, s: usize) -> Option<usize> {
        self.paired.iter().position(|p| *p == Some(s))
    }

    fn pair(&mut self, s: usize, d: usize) {
        self.paired[d] = Some(s);
        self.used[s] = true;
    }

    /// git's first pass: a destination with the same blob as a source (an empty blob is never a
    /// rename, as in git's merge), an unused one of the same name first.
    fn exact(&mut self) -> Result<()> {
        let empty = git2::Oid::hash_object(git2::ObjectType::Blob, b"")
            .map_err(|e| Error::git("hashing the empty blob", e))?;
        for d in 0..self.dst.len() {
            let t = &self.dst[d];
            if t.id == empty {
                continue;
            }
            let fits =
                |s: &Side| s.id == t.id && ((s.is_regular() && t.is_regular()) || s.mode == t.mode);
            let all: Vec<usize> = (0..self.src.len())
                .filter(|&s| !self.used[s] && fits(&self.src[s]))
                .collect();
            let best = all
                .iter()
                .find(|&&s| self.src[s].basename() == t.basename())
                .or(all.first());
            if let Some(&s) = best {
                self.pair(s, d);
            }
        }
        Ok(())
    }

    /// git's basename pass: a source whose file name is unique among the sources left, and a
    /// destination of that name unique among the destinations left, at 75%.
    fn by_basename(&mut self, relevant: &[usize]) -> Result<()> {
        let srcs: Vec<usize> = relevant
            .iter()
            .copied()
            .filter(|&s| !self.used[s])
            .collect();
        let dsts: Vec<usize> = (0..self.dst.len())
            .filter(|&d| self.paired[d].is_none())
            .collect();
        for &s in &srcs {
            let name = self.src[s].basename();
            let unique =
                |names: &mut dyn Iterator<Item = &str>| names.filter(|n| *n == name).count() == 1;
            if !unique(&mut srcs.iter().map(|&x| self.src[x].basename())) {
                continue;
            }
            let same: Vec<usize> = dsts
                .iter()
                .copied()
                .filter(|&d| self.dst[d].basename() == name)
                .collect();
            if let [d] = same[..]
                && self.paired[d].is_none()
                && self.score(s, d, BASENAME_SCORE)? >= BASENAME_SCORE
            {
                self.pair(s, d);
            }
        }
        Ok(())
    }

    /// git's matrix pass: every destination left against every source left, the best four per
    /// destination at 50% or more, then the best pairs first (a same-named one first on a tie).
    fn by_score(&mut self, relevant: &[usize]) -> Result<()> {
        let srcs: Vec<usize> = relevant
            .iter()
            .copied()
            .filter(|&s| !self.used[s])
            .collect();
        let mut all = Vec::new();
        for d in 0..self.dst.len() {
            if self.paired[d].is_some() || srcs.is_empty() {
                continue;
            }
            let mut best = Vec::new();
            for &s in &srcs {
                let score = self.score(s, d, MIN_SCORE)?;
                let same = self.src[s].basename() == self.dst[d].basename();
                if score >= MIN_SCORE {
                    best.push((score, same, s, d));
                }
            }
            best.sort_by_key(|c| std::cmp::Reverse((c.0, c.1)));
            all.extend(best.into_iter().take(CANDIDATES_PER_DST));
        }
        all.sort_by_key(|c| std::cmp::Reverse((c.0, c.1)));
        for (_, _, s, d) in all {
            if self.paired[d].is_none() && !self.used[s] {
                self.pair(s, d);
            }
        }
        Ok(())
    }

    /// git's `estimate_similarity` of source `s` and destination `d` (0 when the sizes alone
    /// rule out `min`, or either is not a regular file).
    fn score(&mut self, s: usize, d: usize, min: u64) -> Result<u64> {
        let (a, b) = (&self.src[s], &self.dst[d]);
        if !a.is_regular() || !b.is_regular() {
            return Ok(0);
        }
        let (ida, idb) = (a.id, b.id);
        let (sa, sb) = (self.size(ida)?, self.size(idb)?);
        let (max, base) = (sa.max(sb), sa.min(sb));
        if max == 0 || max * (MAX_SCORE - min) < (max - base) * MAX_SCORE {
            return Ok(0);
        }
        self.hash(ida)?;
        self.hash(idb)?;
        let span = |id| self.blobs[&id].1.as_ref().expect("hashed");
        let copied = copied_bytes(span(ida), span(idb));
        Ok(copied * MAX_SCORE / max)
    }

    fn size(&mut self, id: git2::Oid) -> Result<u64> {
        if let Some((n, _)) = self.blobs.get(&id) {
            return Ok(*n);
        }
        let odb = self
            .repo
            .odb()
            .map_err(|e| Error::git("opening the object database", e))?;
        let (n, _) = odb
            .read_header(id)
            .map_err(|e| Error::git(format!("reading blob {id}"), e))?;
        self.blobs.insert(id, (n as u64, None));
        Ok(n as u64)
    }

    /// Makes sure the blob's spans are known.
    fn hash(&mut self, id: git2::Oid) -> Result<()> {
        if self.blobs.get(&id).is_none_or(|(_, h)| h.is_none()) {
            let blob = self
                .repo
                .find_blob(id)
                .map_err(|e| Error::git(format!("reading blob {id}"), e))?;
            let h = spans(blob.content());
            self.blobs.insert(id, (blob.size() as u64, Some(h)));
        }
        Ok(())
    }
}

/// git's `hash_chars`: the file cut into chunks that end at a newline or after 64 bytes (a CR
/// before a LF is skipped in a text file), each chunk's hash -> the bytes of such chunks.
fn spans(buf: &[u8]) -> HashMap<u32, u64> {
    let text = !buf[..buf.len().min(8000)].contains(&0);
    let mut out: HashMap<u32, u64> = HashMap::new();
    let (mut a1, mut a2, mut n) = (0u32, 0u32, 0u64);
    let mut add = |a1: u32, a2: u32, n: u64| {
        *out.entry(a1.wrapping_add(a2.wrapping_mul(0x61)) % HASHBASE)
            .or_default() += n;
    };
    for (i, &c) in buf.iter().enumerate() {
        if text && c == b'\r' && buf.get(i + 1) == Some(&b'\n') {
            continue;
        }
        let old1 = a1;
        a1 = ((a1 << 7) ^ (a2 >> 25)).wrapping_add(u32::from(c));
        a2 = (a2 << 7) ^ (old1 >> 25);
        n += 1;
        if n < 64 && c != b'\n' {
            continue;
        }
        add(a1, a2, n);
        (a1, a2, n) = (0, 0, 0);
    }
    if n > 0 {
        add(a1, a2, n);
    }
    out
}

/// git's `diffcore_count_changes`: the source's bytes found in the destination.
fn copied_bytes(src: &HashMap<u32, u64>, dst: &HashMap<u32, u64>) -> u64 {
    src.iter()
        .map(|(h, n)| (*n).min(dst.get(h).copied().unwrap_or(0)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_at_newlines_or_64_bytes_and_skip_a_cr_before_lf() {
        let s = spans(b"ab\nab\ncd");
        assert_eq!(s.values().sum::<u64>(), 8);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(spans(b"ab\r\n"), spans(b"ab\n"));
        assert_eq!(spans(&[b'x'; 130]).values().sum::<u64>(), 130);
        // A binary file keeps its CRs.
        assert_ne!(spans(b"\0ab\r\n"), spans(b"\0ab\n"));
    }

    #[test]
    fn copied_bytes_count_each_chunk_at_most_as_often_as_both_have_it() {
        let a = spans(b"x\nx\ny\n");
        let b = spans(b"x\ny\ny\nz\n");
        assert_eq!(copied_bytes(&a, &b), 4);
    }
}
