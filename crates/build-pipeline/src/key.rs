//! Content keys: labelled lines hashed into the cache's names, and the stamp that says what a
//! Ninja tree holds.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::error::{Context, Result};
use crate::install::write_atomic;

/// The first 20 hex digits of `s`'s SHA-256: the build cache's keys.
pub fn short_hash(s: &str) -> String {
    sha256_hex(s.as_bytes(), 20)
}

/// The first `digits` lowercase hex digits of `bytes`' SHA-256 (sha2's `LowerHex`), the one
/// digest-to-name helper of the builds and the tasks.
pub fn sha256_hex(bytes: &[u8], digits: usize) -> String {
    let mut hex = format!("{:x}", Sha256::digest(bytes));
    hex.truncate(digits);
    hex
}

/// Key material as `label=value` lines, one per line of each value, so two fields can never
/// blend into one another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLines(String);

impl KeyLines {
    pub fn new() -> KeyLines {
        KeyLines::default()
    }

    /// Adds the line `label=value`.
    pub fn push(&mut self, label: &str, value: &str) -> &mut KeyLines {
        let _ = writeln!(self.0, "{label}={value}");
        self
    }

    /// Adds `label=line` for each line of `value` (none for an empty value): a compiler's
    /// `--version` text, say.
    pub fn push_lines(&mut self, label: &str, value: &str) -> &mut KeyLines {
        for l in value.lines() {
            self.push(label, l);
        }
        self
    }

    /// Adds `label=value` for each value.
    pub fn push_all<'a>(
        &mut self,
        label: &str,
        values: impl IntoIterator<Item = &'a str>,
    ) -> &mut KeyLines {
        for v in values {
            self.push(label, v);
        }
        self
    }

    /// The lines themselves.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// These lines followed by `more`'s: a full key extends the dir key's material.
    pub fn extended(&self, more: &KeyLines) -> KeyLines {
        KeyLines(format!("{}{}", self.0, more.0))
    }

    /// The key: [`short_hash`] of the lines.
    pub fn key(&self) -> String {
        short_hash(&self.0)
    }
}

/// The keys of one build: `dir_key` names the Ninja tree (what shapes the compiled objects),
/// `key` the output (the dir key's material plus what only changes the sources, a series hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub dir_key: String,
    pub key: String,
}

impl Keys {
    /// The keys of `dir` material extended by `more` material.
    pub fn of(dir: &KeyLines, more: &KeyLines) -> Keys {
        Keys {
            dir_key: dir.key(),
            key: dir.extended(more).key(),
        }
    }
}

/// Reads a stamp (`stamp.json`): `None` when it is missing or unreadable.
pub fn read_stamp<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes a stamp atomically (pretty JSON): readers see the old one or the new one.
pub fn write_stamp<T: Serialize>(path: &Path, stamp: &T) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(stamp)?.as_bytes())
}

/// Removes a stamp before a tree changes: an interrupted build must not claim what it holds.
pub fn remove_stamp(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_keep_the_names_they_had() {
        // sha256("abc") = ba7816bf8f01cfea414140de…: cache keys (20 digits) and fuzz seed names
        // (16) are what the hand-written `{:02x}` loops made, so existing caches stay valid.
        assert_eq!(short_hash("abc"), "ba7816bf8f01cfea4141");
        assert_eq!(sha256_hex(b"abc", 16), "ba7816bf8f01cfea");
    }

    #[test]
    fn lines_are_labelled_per_line_and_extend() {
        let mut dir = KeyLines::new();
        dir.push("pin", "abc").push_lines("compiler", "gcc\n13.2");
        assert_eq!(dir.as_str(), "pin=abc\ncompiler=gcc\ncompiler=13.2\n");
        let mut more = KeyLines::new();
        more.push("series", "s1");
        let keys = Keys::of(&dir, &more);
        assert_eq!(keys.dir_key, dir.key());
        assert_ne!(keys.key, keys.dir_key);
        more.push("series", "s2");
        assert_eq!(Keys::of(&dir, &more).dir_key, keys.dir_key);
        assert_ne!(Keys::of(&dir, &more).key, keys.key);
    }

    #[test]
    fn stamps_round_trip_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stamp.json");
        assert_eq!(read_stamp::<Vec<String>>(&p), None);
        write_stamp(&p, &vec!["a".to_string()]).unwrap();
        assert_eq!(read_stamp::<Vec<String>>(&p), Some(vec!["a".to_string()]));
        remove_stamp(&p).unwrap();
        remove_stamp(&p).unwrap();
        assert!(!p.exists());
    }
}
