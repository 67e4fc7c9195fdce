//! Pulls named definitions out of the tree under test and emits them as C++
//! with `#line` markers, so compiler errors point into the MLX file.
//!
//! Starting from root names, every identifier in an extracted definition that
//! names a top-level function, macro or file-scope constant of the searched
//! files is extracted too (transitive closure). Identifiers with no
//! definition there are left to the shims. A name defined more than once in
//! the first file that defines it is an error: the emulator must never guess
//! which overload MLX would use.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};
use overlay::symbols::{self, SymbolKind};

/// The files of one tree that the emulator reads, by tree-relative path.
#[derive(Clone, Debug)]
pub struct TreeFiles {
    /// Shown in reports and baked into the binaries ("patched", "pristine").
    pub label: String,
    pub files: BTreeMap<String, String>,
}

pub const KERNEL_HEADER: &str = "mlx/backend/metal/kernels/quantized.h";
pub const HOST_SOURCE: &str = "mlx/backend/metal/quantized.cpp";
/// The kernel library source: the instantiation lines of the kernels.
pub const METAL_SOURCE: &str = "mlx/backend/metal/kernels/quantized.metal";
/// Where `instantiate_kernel` is defined.
pub const METAL_DEFINES: &str = "mlx/backend/metal/kernels/defines.h";
/// Where host helpers used by the dispatch code live, searched in order.
pub const HOST_SEARCH: &[&str] = &[HOST_SOURCE, "mlx/backend/common/quantized.h", "mlx/utils.h"];

impl TreeFiles {
    /// Every path the emulator may read.
    pub fn wanted() -> Vec<&'static str> {
        let mut v = vec![
            KERNEL_HEADER,
            METAL_SOURCE,
            METAL_DEFINES,
            crate::sdpa::KERNELS,
            crate::sdpa::HOST,
        ];
        v.extend_from_slice(HOST_SEARCH);
        v
    }

    pub fn from_dir(label: &str, dir: &std::path::Path) -> Result<TreeFiles> {
        Self::read(label, &mut |p| {
            let path = dir.join(p);
            if !path.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
            Ok(Some(text))
        })
    }

    pub fn from_tree(
        label: &str,
        tree: &overlay::tree::Tree,
        src: &dyn overlay::tree::BlobSource,
    ) -> Result<TreeFiles> {
        Self::read(label, &mut |p| {
            tree.bytes(p, src)?
                .map(|b| {
                    String::from_utf8(b).map_err(|_| Error::NotUtf8 {
                        path: p.to_string(),
                    })
                })
                .transpose()
        })
    }

    /// The fixed files, then the Metal-backend headers the host source
    /// includes (an overlay may declare types there that its dispatch uses).
    fn read(label: &str, get: &mut dyn FnMut(&str) -> Result<Option<String>>) -> Result<TreeFiles> {
        let mut files = BTreeMap::new();
        for p in Self::wanted() {
            if let Some(text) = get(p)? {
                files.insert(p.to_string(), text);
            }
        }
        // Every MLX header the host source reaches: the syntax check compiles
        // the whole file against the tree's own headers.
        let mut queue: Vec<String> = files
            .get(HOST_SOURCE)
            .map(|t| mlx_includes(t))
            .unwrap_or_default();
        while let Some(p) = queue.pop() {
            if files.contains_key(&p) {
                continue;
            }
            if let Some(text) = get(&p)? {
                queue.extend(mlx_includes(&text));
                files.insert(p, text);
            }
        }
        Self::checked(label, files)
    }

    /// Headers under `mlx/backend/metal/` included by the host source, where
    /// [`extract`] looks up enum types.
    pub fn host_type_headers(&self) -> Vec<String> {
        self.files
            .get(HOST_SOURCE)
            .map(|t| metal_includes(t))
            .unwrap_or_default()
            .into_iter()
            .filter(|p| self.files.contains_key(p))
            .collect()
    }

    fn checked(label: &str, files: BTreeMap<String, String>) -> Result<TreeFiles> {
        for p in [KERNEL_HEADER, HOST_SOURCE] {
            if !files.contains_key(p) {
                return Err(Error::MissingFile {
                    label: label.to_string(),
                    path: p.to_string(),
                });
            }
        }
        Ok(TreeFiles {
            label: label.to_string(),
            files,
        })
    }

    pub fn get(&self, path: &str) -> Result<&str> {
        self.files
            .get(path)
            .map(String::as_str)
            .ok_or_else(|| Error::MissingFile {
                label: self.label.clone(),
                path: path.to_string(),
            })
    }
}

/// `#include "mlx/..."` lines of `src`, in order (MLX includes its own
/// headers by their path from the tree root).
fn mlx_includes(src: &str) -> Vec<String> {
    src.lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix("#include")?.trim();
            let p = l.strip_prefix('"')?.split('"').next()?;
            p.starts_with("mlx/").then(|| p.to_string())
        })
        .collect()
}

/// `#include "mlx/backend/metal/*.h"` lines of `src`, in order.
fn metal_includes(src: &str) -> Vec<String> {
    mlx_includes(src)
        .into_iter()
        .filter(|p| p.starts_with("mlx/backend/metal/") && p.ends_with(".h"))
        .collect()
}

/// One extracted piece: its file, first line and text.
#[derive(Clone, Debug)]
struct Piece {
    file_rank: usize,
    start: usize,
    path: String,
    line: usize,
    text: String,
    /// Enclosing namespaces below the unit's own (`metal` for
    /// `mlx::core::metal::f` in a unit inside `mlx::core`).
    namespace: String,
}

/// The result of an extraction.
#[derive(Clone, Debug)]
pub struct Extracted {
    /// C++ text with `#line` markers.
    pub code: String,
    /// Names of the extracted definitions, in emission order.
    pub names: Vec<String>,
    /// Optional roots that were found.
    pub optional_found: Vec<String>,
}

/// Identifiers of C-family source, skipping comments, string and character
/// literals (a kernel name inside a string is not a reference).
/// A `constant T NAME [[function_constant(I)]];` declaration of Metal source.
pub struct FunctionConstant<'a> {
    /// The whole line, trimmed (for messages).
    pub line: &'a str,
    /// `T NAME`, when the part before the attribute is exactly two words.
    pub decl: Option<(&'a str, &'a str)>,
    /// `I` as written.
    pub index: &'a str,
}

/// Every function-constant declaration of `src`, in order.
pub fn function_constants(src: &str) -> impl Iterator<Item = FunctionConstant<'_>> {
    const ATTR: &str = "[[function_constant(";
    src.lines().filter_map(|line| {
        let l = line.trim();
        let rest = l.strip_prefix("constant ")?;
        let k = rest.find(ATTR)?;
        let words: Vec<&str> = rest[..k].split_whitespace().collect();
        let decl = match words[..] {
            [ty, name] => Some((ty, name)),
            _ => None,
        };
        let index = rest[k + ATTR.len()..].split(")]]").next().unwrap_or("");
        Some(FunctionConstant {
            line: l,
            decl,
            index,
        })
    })
}

pub fn identifiers(src: &str) -> Vec<&str> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(&src[s..i]);
        } else if c.is_ascii_digit() {
            // Skip numeric literals with suffixes (0x0f, 4.0f, 1e-7).
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// One definition: byte range, first line, qualified name.
struct Def {
    start: usize,
    end: usize,
    line: usize,
    qualified: String,
}

struct FileIndex<'a> {
    path: &'a str,
    text: &'a str,
    index: symbols::SymbolIndex,
}

impl FileIndex<'_> {
    /// Top-level definitions of `kinds` named `name` (members of classes are
    /// not candidates: they are reached through their class), with their
    /// qualified names.
    fn definitions_of(&self, name: &str, kinds: &[SymbolKind]) -> Vec<Def> {
        let syms = self.index.symbols();
        syms.iter()
            .filter(|s| s.name == name && kinds.contains(&s.kind))
            .filter(|s| {
                !syms.iter().any(|o| {
                    o.span.start <= s.span.start && s.span.end <= o.span.end && o.span != s.span
                })
            })
            .map(|s| Def {
                start: s.span.start,
                end: s.span.end,
                line: s.start_line,
                qualified: s.qualified.clone(),
            })
            .collect()
    }

    fn definitions(&self, name: &str) -> Vec<Def> {
        self.definitions_of(name, &[SymbolKind::Function, SymbolKind::Macro])
    }

    /// File-scope single-line declarations `... NAME = ...;` outside every
    /// definition, e.g. `MLX_MTL_CONST int SIMD_SIZE = 32;`.
    fn constants(&self, name: &str) -> Vec<Def> {
        let mut out = Vec::new();
        let mut offset = 0;
        for (n, line) in self.text.split_inclusive('\n').enumerate() {
            let start = offset;
            offset += line.len();
            let t = line.trim();
            if !t.ends_with(';') || t.starts_with('#') || t.starts_with("//") {
                continue;
            }
            let ids = identifiers(t);
            let Some(pos) = ids.iter().position(|i| *i == name) else {
                continue;
            };
            // The name must be the declarator: followed by `=` in the text.
            let after = t.split(name).nth(1).unwrap_or("").trim_start();
            if pos == 0 || !after.starts_with('=') || after.starts_with("==") {
                continue;
            }
            let inside = self
                .index
                .symbols()
                .iter()
                .any(|s| s.span.start <= start && start < s.span.end);
            if !inside {
                out.push(Def {
                    start,
                    end: start + line.len(),
                    line: n + 1,
                    qualified: name.to_string(),
                });
            }
        }
        out
    }
}

/// Where [`extract`] looks: functions, macros and constants in `search` (in
/// priority order), enum types in `types`; the generated unit wraps the code
/// in `namespace`, so definitions there are emitted without it.
pub struct Scope<'a> {
    pub search: &'a [&'a str],
    pub types: &'a [String],
    pub namespace: &'a str,
}

/// Extracts `roots` (required) and `optional` (taken when present) with their
/// transitive dependencies from `search` (paths of `files`, in priority
/// order), except names in `exclude` (provided by the shims).
pub fn extract(
    files: &TreeFiles,
    search: &[&str],
    roots: &[&str],
    optional: &[&str],
    exclude: &[&str],
) -> Result<Extracted> {
    extract_in(
        files,
        &Scope {
            search,
            types: &[],
            namespace: "",
        },
        roots,
        optional,
        exclude,
    )
}

/// [`extract`] with enum types and namespaces (see [`Scope`]).
pub fn extract_in(
    files: &TreeFiles,
    scope: &Scope,
    roots: &[&str],
    optional: &[&str],
    exclude: &[&str],
) -> Result<Extracted> {
    let search = scope.search;
    let mut idx = Vec::new();
    for p in search
        .iter()
        .copied()
        .chain(scope.types.iter().map(String::as_str))
    {
        if let Some(text) = files.files.get(p) {
            idx.push(FileIndex {
                path: p,
                text,
                index: symbols::scan(text),
            });
        }
    }
    let n_search = idx.iter().filter(|f| search.contains(&f.path)).count();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut seen: BTreeSet<String> = exclude.iter().map(|s| s.to_string()).collect();
    let mut queue: Vec<(String, bool)> = roots.iter().map(|r| (r.to_string(), true)).collect();
    let mut optional_found = Vec::new();
    for o in optional {
        let found = idx.iter().any(|f| !f.definitions(o).is_empty());
        if found {
            optional_found.push(o.to_string());
            queue.push((o.to_string(), true));
        }
    }
    let mut names = Vec::new();
    while let Some((name, required)) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some((rank, def)) = find_definition(&idx, n_search, &name)? else {
            if required {
                return Err(Error::Source(format!(
                    "`{name}` is not defined in {} of the {} tree",
                    search.join(", "),
                    files.label
                )));
            }
            continue;
        };
        let f = &idx[rank];
        let (start, line) = (def.start, def.line);
        let mut text = f.text[def.start..def.end].to_string();
        if !text.trim_end().ends_with(';') && rank >= n_search {
            // An enum's span stops at its closing brace.
            text.push(';');
        }
        let namespace = relative_namespace(&def.qualified, &name, scope.namespace);
        for id in identifiers(&text) {
            if !seen.contains(id) {
                queue.push((id.to_string(), false));
            }
        }
        names.push(name);
        pieces.push(Piece {
            file_rank: rank,
            start,
            path: f.path.to_string(),
            line,
            text,
            namespace,
        });
    }
    // Later files are lower-level helpers (utils.h before quantized.cpp needs
    // them); within a file, source order keeps declarations before uses.
    pieces.sort_by(|a, b| b.file_rank.cmp(&a.file_rank).then(a.start.cmp(&b.start)));
    Ok(Extracted {
        code: render_pieces(&pieces),
        names,
        optional_found,
    })
}

/// The one definition of `name`: the first file (by rank) that has any, its functions, macros
/// and constants in the searched files (the first `n_search`), enums in the type files; an error
/// when that file has several.
fn find_definition(idx: &[FileIndex], n_search: usize, name: &str) -> Result<Option<(usize, Def)>> {
    for (rank, f) in idx.iter().enumerate() {
        let mut defs = if rank < n_search {
            f.definitions(name)
        } else {
            f.definitions_of(name, &[SymbolKind::Enum])
        };
        if defs.is_empty() && rank < n_search {
            defs = f.constants(name);
        }
        match defs.len() {
            0 => continue,
            1 => return Ok(Some((rank, defs.remove(0)))),
            n => {
                return Err(Error::Source(format!(
                    "{}: `{name}` has {n} definitions (lines {}); the emulator will not guess which one MLX uses",
                    f.path,
                    defs.iter()
                        .map(|d| d.line.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    Ok(None)
}

/// The pieces as one source, each under its `#line` and in its namespace.
fn render_pieces(pieces: &[Piece]) -> String {
    let mut code = String::new();
    for p in pieces {
        let (open, close) = if p.namespace.is_empty() {
            (String::new(), String::new())
        } else {
            (
                format!("namespace {} {{\n", p.namespace),
                format!("}} // namespace {}\n", p.namespace),
            )
        };
        code.push_str(&format!(
            "{open}#line {} \"{}\"\n{}\n{close}",
            p.line, p.path, p.text
        ));
    }
    code
}

/// The namespaces of `qualified` (a definition named `name`) below `base`:
/// `mlx::core::metal::f` in `mlx::core` is `metal`. Class qualifiers of
/// out-of-class member definitions never reach here (members are not
/// extracted), so every component is a namespace.
fn relative_namespace(qualified: &str, name: &str, base: &str) -> String {
    let ns = qualified
        .strip_suffix(name)
        .map(|q| q.trim_end_matches("::"))
        .unwrap_or("");
    let rel = if base.is_empty() {
        ns
    } else if ns == base {
        ""
    } else {
        ns.strip_prefix(base)
            .and_then(|r| r.strip_prefix("::"))
            .unwrap_or(ns)
    };
    rel.to_string()
}

/// Replaces every `from` by `to` inside the definition `name` of `path`; the
/// perturbation control uses this on a copy of the tree. Fails when the site
/// is missing, so a control can never silently become a no-op.
pub fn perturb(
    files: &TreeFiles,
    path: &str,
    name: &str,
    from: &str,
    to: &str,
) -> Result<TreeFiles> {
    let text = files.get(path)?;
    let index = symbols::scan(text);
    let defs: Vec<_> = index
        .find(name)
        .into_iter()
        .filter(|s| s.kind == SymbolKind::Function && s.name == name)
        .collect();
    if defs.len() != 1 {
        return Err(Error::Source(format!(
            "perturbation: `{name}` has {} definitions in {path}",
            defs.len()
        )));
    }
    let span = defs[0].span.clone();
    let body = &text[span.clone()];
    if !body.contains(from) {
        return Err(Error::Source(format!(
            "perturbation: `{from}` not found in `{name}` of {path}"
        )));
    }
    let mut out = files.clone();
    out.label = format!("{}-perturbed", files.label);
    let new = format!(
        "{}{}{}",
        &text[..span.start],
        body.replace(from, to),
        &text[span.end..]
    );
    out.files.insert(path.to_string(), new);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> TreeFiles {
        let mut files = BTreeMap::new();
        files.insert("a.h".to_string(), text.to_string());
        TreeFiles {
            label: "t".into(),
            files,
        }
    }

    #[test]
    fn closure_follows_references_and_skips_strings() {
        let t = tree(
            "#define K_CONST static const\nK_CONST int SIZE = 4;\n\
             int helper(int x) { return x * SIZE; }\n\
             int unused() { return 1; }\n\
             int root() { const char* s = \"unused\"; return helper(2); }\n",
        );
        let e = extract(&t, &["a.h"], &["root"], &[], &[]).unwrap();
        let mut n = e.names.clone();
        n.sort();
        assert_eq!(n, ["K_CONST", "SIZE", "helper", "root"]);
        // Source order, with line markers into the original file.
        let h = e.code.find("int helper").unwrap();
        let r = e.code.find("int root").unwrap();
        assert!(e.code.find("int SIZE").unwrap() < h && h < r);
        assert!(e.code.contains("#line 3 \"a.h\"\nint helper"));
    }

    #[test]
    fn ambiguous_and_missing_names_fail() {
        let t = tree(
            "int f(int) { return 1; }\nint f(float) { return 2; }\nint g() { return f(1); }\n",
        );
        let err = extract(&t, &["a.h"], &["g"], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("2 definitions"), "{err}");
        let err = extract(&t, &["a.h"], &["nope"], &[], &[]).unwrap_err();
        assert!(err.to_string().contains("not defined"), "{err}");
        // Optional names are simply absent.
        let e = extract(&t, &["a.h"], &[], &["nope"], &[]).unwrap();
        assert!(e.optional_found.is_empty());
    }

    #[test]
    fn perturb_requires_the_site() {
        let t = tree("int f(int a, int b, int c) { return a + b + c; }\n");
        let p = perturb(&t, "a.h", "f", "a + b", "b + a").unwrap();
        assert!(p.files["a.h"].contains("return b + a + c"));
        assert!(perturb(&t, "a.h", "f", "x + y", "y + x").is_err());
    }
}
