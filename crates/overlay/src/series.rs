//! `overlays/<name>/series`: the order in which overlays apply, one file name per line.

use std::path::{Path, PathBuf};

use crate::error::{Error, InputKind, IoContext, Result};
use crate::patch::{Overlay, parse_overlay};

/// The series file's name, in the overlay folder.
pub const SERIES_FILE: &str = "series";

#[derive(Debug, Clone)]
/// An overlay folder: its series file and the overlays it lists.
pub struct Series {
    /// The overlay folder.
    pub dir: PathBuf,
    /// Raw text of the series file (kept so an unchanged series keeps every byte).
    pub raw: String,
    /// The overlays, in series order.
    pub overlays: Vec<Overlay>,
}

/// Why `name` cannot be an overlay's file name in a series, if it cannot: the one rule both the
/// series parser and `new-overlay` apply, so a name one accepts the other never rejects. A name is a
/// plain file name of the overlay folder: not empty, not `.` or `..`, no `/` or `\`, no `#` (it
/// starts a comment), no whitespace (it separates options) and no control characters.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("not an empty name")
    } else if name == "." || name == ".." || name.contains(['/', '\\']) {
        Some("not a path")
    } else if name.contains('#') {
        Some("without `#` (it starts a comment)")
    } else if name.contains(char::is_whitespace) {
        Some("without whitespace (it separates words)")
    } else if name.contains(char::is_control) {
        Some("without control characters")
    } else {
        None
    }
}

/// The series entries with their 1-based line numbers.
pub fn parse_series_names(path: &Path, text: &str) -> Result<Vec<(String, usize)>> {
    let mut names: Vec<(String, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let entry = line.split('#').next().unwrap_or("").trim();
        if entry.is_empty() {
            continue;
        }
        if entry.split_whitespace().count() > 1 {
            return Err(series_error(path, Some(n), format!("expected one file name, found {entry:?}"))
                .with_help("options such as quilt's -p1 are not supported: overlays are always git's a/ b/ form"));
        }
        if let Some(why) = name_problem(entry) {
            return Err(series_error(
                path,
                Some(n),
                format!("{entry:?}: expected a file name in this folder, {why}"),
            )
            .with_help("put the overlay file in this folder and list its plain name"));
        }
        if let Some((_, first)) = names.iter().find(|(e, _)| e == entry) {
            return Err(series_error(
                path,
                Some(n),
                format!("{entry} is listed twice (first on line {first})"),
            )
            .with_help("an overlay applies once: remove one of the two lines"));
        }
        names.push((entry.to_string(), n));
    }
    Ok(names)
}

/// The error for an overlay folder without its `series` file, naming the overlays it would leave out.
fn missing_series(dir: &Path, path: &Path) -> Error {
    let mut patches: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".patch"))
        .collect();
    patches.sort();
    let found = if patches.is_empty() {
        String::new()
    } else {
        format!(" ({} overlay files here would be left out)", patches.len())
    };
    series_error(path, None, format!("no series file{found}")).with_help(format!(
        "restore it (`git checkout -- {}`), or create it listing the overlays in order, one file \
         name per line; an empty file means no overlays",
        path.display()
    ))
}

impl Series {
    /// Reads the series file and parses every overlay it names. The series file is required: a
    /// missing one is an error, never an empty series (a deleted or lost `series` would otherwise
    /// give the plain upstream tree with every overlay silently left out). No overlays is an empty
    /// file.
    pub fn load(dir: &Path) -> Result<Series> {
        let path = dir.join(SERIES_FILE);
        let raw = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing_series(dir, &path));
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let mut overlays = Vec::new();
        let names = parse_series_names(&path, &raw)?;
        // A listed name may be a symlink; its target must stay in this folder, or the series would
        // apply (and refresh would rewrite) a file the project does not hold.
        let real_dir = std::fs::canonicalize(dir).ok();
        for (name, n) in names {
            let p = dir.join(&name);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                let real = std::fs::canonicalize(&p).ok();
                let inside = match (&real, &real_dir) {
                    (Some(r), Some(d)) => r.parent() == Some(d.as_path()),
                    _ => false,
                };
                if !inside {
                    return Err(series_error(
                        &path,
                        Some(n),
                        format!(
                            "{name} is a symlink to {}, outside {}",
                            std::fs::read_link(&p).unwrap_or_default().display(),
                            dir.display()
                        ),
                    )
                    .with_help(
                        "copy the overlay into this folder (overlays are files of the project)",
                    ));
                }
            }
            let text = match std::fs::read(&p) {
                Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
                    series_error(&p, None, "not UTF-8 text; overlays must be UTF-8")
                })?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(series_error(
                        &path,
                        Some(n),
                        format!("{name}: no such file in {}", dir.display()),
                    )
                    .with_help("fix the name, or remove the line from the series"));
                }
                Err(e) => return Err(Error::io(&p, e)),
            };
            overlays.push(parse_overlay(&name, &p, &text)?);
        }
        Ok(Series {
            dir: dir.to_path_buf(),
            raw,
            overlays,
        })
    }

    /// `*.patch` files in the folder that the series does not list.
    pub fn unlisted(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if !self.dir.is_dir() {
            return Ok(out);
        }
        for e in std::fs::read_dir(&self.dir).at(&self.dir)? {
            let name = e.at(&self.dir)?.file_name().to_string_lossy().to_string();
            if name.ends_with(".patch") && !self.overlays.iter().any(|o| o.name == name) {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// A content hash of the series and every overlay, for cache keys.
    pub fn content_hash(&self) -> String {
        let mut all = Vec::new();
        all.extend_from_slice(self.raw.as_bytes());
        for o in &self.overlays {
            all.extend_from_slice(format!("\0{}\0{}\0", o.name, o.raw.len()).as_bytes());
            all.extend_from_slice(o.raw.as_bytes());
        }
        git2::Oid::hash_object(git2::ObjectType::Blob, &all)
            .map(|o| o.to_string())
            .unwrap_or_default()
    }
}

/// An input error about the series (tagged [`InputKind::Series`]).
fn series_error(path: impl AsRef<Path>, line: Option<usize>, message: impl Into<String>) -> Error {
    Error::input(path, line, message).of(InputKind::Series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_comments_and_errors() {
        let p = Path::new("overlays/x/series");
        let names = parse_series_names(p, "# head\n\na.patch\n  b.patch # why\n").unwrap();
        assert_eq!(
            names,
            vec![("a.patch".to_string(), 3), ("b.patch".to_string(), 4)]
        );
        let e = parse_series_names(p, "a.patch\na.patch\n").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Input(InputKind::Series), "{e}");
        let e = e.to_string();
        assert_eq!(
            e,
            "overlays/x/series:2: a.patch is listed twice (first on line 1)\n  help: an overlay applies once: remove one of the two lines"
        );
        let e = parse_series_names(p, "../a.patch\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("overlays/x/series:1: \"../a.patch\": expected a file name"),
            "{e}"
        );
        let e = parse_series_names(p, "a.patch -p1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("quilt"), "{e}");
    }
}
