//! `pins.toml`: the single source of truth for each upstream (URL + full commit + overlay folder).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, InputKind, IoContext, Result};

/// The manifest's file name, at the project root.
pub const PINS_FILE: &str = "pins.toml";

/// One `[upstream.<name>]` table, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Upstream {
    /// The `<name>` of the table.
    pub name: String,
    /// As written in pins.toml: any git URL or a local path. URL rewriting happens at fetch time.
    pub url: String,
    /// Full 40-hex commit, lowercase.
    pub rev: String,
    /// Overlay folder, relative to the root that holds pins.toml.
    pub overlays: PathBuf,
    /// The upstream branch whose head `drift` and the canary compare against (fetched by the CLI).
    pub branch: Option<String>,
    /// FetchContent redirections for the build (name -> dir or URL); opaque to the engine.
    pub fetchcontent: BTreeMap<String, String>,
    /// Pinned sources the upstream's build would fetch (`[upstream.<name>.sources.<dep>]`), in
    /// name order; the build uses them instead of the network.
    pub sources: Vec<Source>,
    /// 1-based line of the `[upstream.<name>]` table, for messages.
    #[serde(skip)]
    pub line: usize,
}

/// One `[upstream.<name>.sources.<dep>]` table: a source the upstream's build fetches, pinned
/// like an upstream (URL + full commit) and handed to CMake as `FETCHCONTENT_SOURCE_DIR_<DEP>`
/// (or, with `bench`, a source only the project's benchmarks build).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Source {
    /// The FetchContent name the upstream's CMake declares (e.g. `cutlass`).
    pub name: String,
    /// Any git URL or a local path.
    pub url: String,
    /// Full 40-hex commit, lowercase.
    pub rev: String,
    /// The tag or branch `rev` was taken from, for people (never resolved).
    pub tag: Option<String>,
    /// Repository paths the build needs (all when empty).
    pub paths: Vec<String>,
    /// How the paths are laid out for CMake: `None` keeps them; `cccl-release` assembles CCCL's
    /// release layout `include/{cuda,nv,cub,thrust}` from the repository.
    pub layout: Option<String>,
    /// Backends whose build needs it (all when empty), e.g. `["cuda"]`.
    pub backends: Vec<String>,
    /// Needed only by the upstream's own test suites (`cargo xtask test-upstream`): `build-mlx`
    /// and the CUDA bundle leave it out.
    pub tests: bool,
    /// Needed only by the project's own benchmarks (`bench = true`, e.g. a peer kernel built on
    /// the GPU machine): the CUDA bundle carries it under `deps/<name>/`, and no build defines it
    /// (no `FETCHCONTENT_SOURCE_DIR_<NAME>`, not in build-mlx or `test-upstream`).
    pub bench: bool,
    /// Git submodules of this source filled from another pinned source: path inside this
    /// source -> that source's name (e.g. nanobind's `ext/robin_map` -> `robin_map`).
    pub submodules: BTreeMap<String, String>,
    /// 1-based line of the table, for messages.
    #[serde(skip)]
    pub line: usize,
}

/// The layouts `Source::layout` may name.
pub const SOURCE_LAYOUTS: &[&str] = &["cccl-release"];

#[derive(Debug, Clone)]
/// The parsed `pins.toml`.
pub struct Pins {
    /// Where it was read from.
    pub path: PathBuf,
    /// In file order.
    pub upstreams: Vec<Upstream>,
    /// The top-level `default = "NAME"`: the upstream a command without `--upstream` works on.
    /// Without it a file naming one upstream defaults to it; one naming several has no default.
    pub default: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPins {
    default: Option<Spanned<String>>,
    #[serde(default)]
    upstream: BTreeMap<String, Spanned<RawUpstream>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    url: Spanned<String>,
    rev: Spanned<String>,
    overlays: Spanned<String>,
    branch: Option<Spanned<String>>,
    #[serde(default)]
    fetchcontent: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    sources: BTreeMap<String, Spanned<RawSource>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    url: Spanned<String>,
    rev: Spanned<String>,
    tag: Option<String>,
    #[serde(default)]
    paths: Vec<Spanned<String>>,
    layout: Option<Spanned<String>>,
    #[serde(default)]
    backends: Vec<String>,
    #[serde(default)]
    tests: bool,
    #[serde(default)]
    bench: bool,
    #[serde(default)]
    submodules: BTreeMap<String, Spanned<String>>,
}

/// The transport of git's `<transport>::<address>` form (ext::, fd::, any git-remote-<name>): such
/// a URL runs a helper program instead of fetching, so a pins.toml must not be able to choose one.
fn remote_helper(url: &str) -> Option<&str> {
    let (helper, _) = url.split_once("::")?;
    let mut chars = helper.chars();
    (chars.next()?.is_ascii_alphanumeric()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(helper)
}

/// A table name: letters, digits, '-' or '_'.
fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Builds the error for `key` at `span` of one table.
type KeyError<'a> = &'a dyn Fn(std::ops::Range<usize>, &str, String) -> Error;

/// The error of a key of the table `table` (`upstream.mlx`): at the line of its span, named in
/// full (`upstream.mlx.rev: ...`).
fn key_error<'a>(
    path: &'a Path,
    text: &'a str,
    table: String,
) -> impl Fn(std::ops::Range<usize>, &str, String) -> Error + 'a {
    move |span, key, msg| {
        pins_error(
            path,
            Some(line_of(text, span.start)),
            format!("{table}.{key}: {msg}"),
        )
    }
}

/// A `url` key: a git URL or a local path, never a remote-helper transport.
fn checked_url(url: &Spanned<String>, err: KeyError<'_>) -> Result<String> {
    let value = url.get_ref().trim().to_string();
    if value.is_empty() {
        return Err(err(
            url.span(),
            "url",
            "expected a git URL or a local path, found an empty string".into(),
        ));
    }
    if let Some(helper) = remote_helper(&value) {
        return Err(err(
            url.span(),
            "url",
            format!("the {helper}:: transport hands the URL to a remote helper (git-remote-{helper}; ext:: runs arbitrary commands) and is refused"),
        )
        .with_help("use https://, ssh://, git://, file:// or a local path"));
    }
    Ok(value)
}

/// A `rev` key: a full 40-hex commit id, lowercased; `hint` says what to do with anything else.
fn checked_rev(rev: &Spanned<String>, err: KeyError<'_>, hint: &str) -> Result<String> {
    let value = rev.get_ref();
    if value.len() != 40 || !value.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(err(
            rev.span(),
            "rev",
            format!("expected a full 40-hex commit id, found {value:?} ({hint})"),
        ));
    }
    Ok(value.to_ascii_lowercase())
}

/// Validates one `[upstream.<up>.sources.<dep>]` table.
fn parse_source(
    path: &Path,
    text: &str,
    up: &str,
    dep: String,
    table: Spanned<RawSource>,
) -> Result<Source> {
    let line = line_of(text, table.span().start);
    let raw = table.into_inner();
    let err = key_error(path, text, format!("upstream.{up}.sources.{dep}"));
    if !is_plain_name(&dep) {
        return Err(pins_error(
            path,
            Some(line),
            format!(
                "source name {dep:?}: expected the FetchContent name (letters, digits, '-' or '_')"
            ),
        ));
    }
    let url = checked_url(&raw.url, &err)?;
    let rev = checked_rev(&raw.rev, &err, "put the tag in `tag`")?;
    let inside = |p: &str| {
        let rel = Path::new(p);
        !p.is_empty()
            && !rel.is_absolute()
            && rel.components().all(|c| matches!(c, Component::Normal(_)))
    };
    let mut paths = Vec::new();
    for p in raw.paths {
        if !inside(p.get_ref()) {
            return Err(err(
                p.span(),
                "paths",
                format!(
                    "expected a path inside the repository, found {:?}",
                    p.get_ref()
                ),
            ));
        }
        paths.push(p.into_inner());
    }
    let layout = match raw.layout {
        Some(l) if !SOURCE_LAYOUTS.contains(&l.get_ref().as_str()) => {
            return Err(err(
                l.span(),
                "layout",
                format!("unknown layout {:?}", l.get_ref()),
            )
            .with_help(format!("known layouts: {}", SOURCE_LAYOUTS.join(", "))));
        }
        l => l.map(Spanned::into_inner),
    };
    if raw.tests && raw.bench {
        return Err(pins_error(
            path,
            Some(line),
            format!("upstream.{up}.sources.{dep}: `tests = true` and `bench = true` together: a source is for the upstream's test suites or for the project's benchmarks, not both"),
        )
        .with_help("keep the one it is for: `tests` sources go to test-upstream, `bench` sources only into the CUDA bundle's deps/"));
    }
    let mut submodules = BTreeMap::new();
    for (at, name) in raw.submodules {
        if !inside(&at) {
            return Err(err(
                name.span(),
                "submodules",
                format!("expected a path inside the repository, found {at:?}"),
            ));
        }
        submodules.insert(at, name.into_inner());
    }
    Ok(Source {
        name: dep,
        url,
        rev,
        tag: raw.tag,
        paths,
        layout,
        backends: raw.backends,
        tests: raw.tests,
        bench: raw.bench,
        submodules,
        line,
    })
}

/// Every submodule names another source of the same upstream, and none names its own table.
fn check_submodules(path: &Path, up: &str, sources: &[Source]) -> Result<()> {
    for s in sources {
        for (at, name) in &s.submodules {
            if name == &s.name || !sources.iter().any(|o| &o.name == name) {
                let known: Vec<&str> = sources
                    .iter()
                    .filter(|o| o.name != s.name)
                    .map(|o| o.name.as_str())
                    .collect();
                return Err(pins_error(
                    path,
                    Some(s.line),
                    format!(
                        "upstream.{up}.sources.{}.submodules: {at:?} names {name:?}, which is not another source",
                        s.name
                    ),
                )
                .with_help(format!(
                    "add [upstream.{up}.sources.{name}] or name one of: {}",
                    known.join(", ")
                )));
            }
        }
    }
    Ok(())
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// One `[upstream.<name>]` table, validated: its name, URL, pin, overlays folder (inside the
/// project), branch, FetchContent pins and sources.
fn parse_upstream(
    path: &Path,
    text: &str,
    name: String,
    table: Spanned<RawUpstream>,
) -> Result<Upstream> {
    let line = line_of(text, table.span().start);
    let raw = table.into_inner();
    let err = key_error(path, text, format!("upstream.{name}"));
    if !is_plain_name(&name) {
        return Err(pins_error(
            path,
            Some(line),
            format!("upstream name {name:?}: expected letters, digits, '-' or '_'"),
        ));
    }
    let url = checked_url(&raw.url, &err)?;
    let rev = checked_rev(
        &raw.rev,
        &err,
        "branch names, tags and short ids are not pins",
    )?;
    let overlays = checked_overlays(&raw.overlays, &err)?;
    let branch = match raw.branch {
        Some(b) if b.get_ref().trim().is_empty() => {
            return Err(err(
                b.span(),
                "branch",
                "expected a branch name, found an empty string".into(),
            ));
        }
        Some(b) => Some(b.into_inner()),
        None => None,
    };
    let fetchcontent = raw
        .fetchcontent
        .into_iter()
        .map(|(k, v)| (k, v.into_inner()))
        .collect();
    let sources = raw
        .sources
        .into_iter()
        .map(|(dep, t)| parse_source(path, text, &name, dep, t))
        .collect::<Result<Vec<_>>>()?;
    check_submodules(path, &name, &sources)?;
    Ok(Upstream {
        name,
        url,
        rev,
        overlays,
        branch,
        fetchcontent,
        sources,
        line,
    })
}

/// The overlays folder: relative to pins.toml and inside the project.
fn checked_overlays(overlays: &Spanned<String>, err: KeyError<'_>) -> Result<PathBuf> {
    let dir = PathBuf::from(overlays.get_ref());
    let escapes = dir.is_absolute()
        || dir
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if overlays.get_ref().is_empty() || escapes {
        return Err(err(
            overlays.span(),
            "overlays",
            format!(
                "expected a folder relative to {}, inside it, found {:?}",
                PINS_FILE,
                overlays.get_ref()
            ),
        ));
    }
    Ok(dir)
}

impl Pins {
    /// Loads `<root>/pins.toml`.
    pub fn load(root: &Path) -> Result<Pins> {
        let path = root.join(PINS_FILE);
        let text = std::fs::read_to_string(&path).at(&path)?;
        Pins::parse(&path, &text)
    }

    /// Parses and validates `text`, read from `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Pins> {
        let raw: RawPins = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            pins_error(path, line, e.message().trim().to_string())
        })?;
        let mut tables: Vec<(String, Spanned<RawUpstream>)> = raw.upstream.into_iter().collect();
        // BTreeMap loses file order; spans give it back.
        tables.sort_by_key(|(_, t)| t.span().start);
        let upstreams = tables
            .into_iter()
            .map(|(name, table)| parse_upstream(path, text, name, table))
            .collect::<Result<Vec<_>>>()?;
        if upstreams.is_empty() {
            return Err(pins_error(path, None, "no [upstream.<name>] table").with_help(
                "add one: [upstream.mlx] url = \"https://github.com/ml-explore/mlx\" rev = \"<40-hex commit>\" overlays = \"overlays/mlx\"",
            ));
        }
        let default = match raw.default {
            Some(d) if !upstreams.iter().any(|u| &u.name == d.get_ref()) => {
                let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                return Err(pins_error(
                    path,
                    Some(line_of(text, d.span().start)),
                    format!("default: no [upstream.{}] table", d.get_ref()),
                )
                .with_help(format!("name one of: {}", known.join(", "))));
            }
            Some(d) => Some(d.into_inner()),
            None if upstreams.len() == 1 => Some(upstreams[0].name.clone()),
            None => None,
        };
        Ok(Pins {
            path: path.to_path_buf(),
            upstreams,
            default,
        })
    }

    /// The named upstream, or the default one when no name is given (an error naming every
    /// upstream when the file names several and no `default`).
    pub fn upstream(&self, name: Option<&str>) -> Result<&Upstream> {
        let known = || {
            let names: Vec<&str> = self.upstreams.iter().map(|u| u.name.as_str()).collect();
            names.join(", ")
        };
        let Some(n) = name.or(self.default.as_deref()) else {
            return Err(pins_error(
                &self.path,
                None,
                format!(
                    "{} upstreams ({}) and no `default`: which one?",
                    self.upstreams.len(),
                    known()
                ),
            )
            .with_help(format!(
                "pass --upstream NAME, or add `default = \"NAME\"` at the top of pins.toml (one of: {})",
                known()
            )));
        };
        self.upstreams.iter().find(|u| u.name == n).ok_or_else(|| {
            pins_error(&self.path, None, format!("no upstream named {n:?}"))
                .with_help(format!("known upstreams: {}", known()))
        })
    }
}

/// An input error about the manifest (tagged [`InputKind::Manifest`]).
fn pins_error(path: impl AsRef<Path>, line: Option<usize>, message: impl Into<String>) -> Error {
    Error::input(path, line, message).of(InputKind::Manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Pins> {
        Pins::parse(Path::new("pins.toml"), text)
    }

    const GOOD: &str = r#"
[upstream.b]
url = "https://example.com/b"
rev = "0123456789abcdef0123456789ABCDEF01234567"
overlays = "overlays/b"

[upstream.a]
url = "/srv/a.git"
rev = "1111111111111111111111111111111111111111"
overlays = "overlays/a"
branch = "main"
[upstream.a.fetchcontent]
json = "/opt/json"
"#;

    #[test]
    fn keeps_file_order_and_normalizes() {
        let pins = parse(GOOD).unwrap();
        let names: Vec<_> = pins.upstreams.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(pins.upstream(Some("a")).unwrap().name, "a");
        assert_eq!(
            pins.upstreams[0].rev,
            "0123456789abcdef0123456789abcdef01234567"
        );
        assert_eq!(pins.upstreams[1].fetchcontent["json"], "/opt/json");
        assert_eq!(pins.upstreams[1].line, 7);
    }

    /// Several upstreams: no `--upstream` needs a `default`, else an error naming every upstream;
    /// one upstream is its own default; a `default` naming no table is an error at its line.
    #[test]
    fn default_upstream_is_explicit_with_several() {
        let pins = parse(GOOD).unwrap();
        expect_test::expect![[r#"
            pins.toml: 2 upstreams (b, a) and no `default`: which one?
              help: pass --upstream NAME, or add `default = "NAME"` at the top of pins.toml (one of: b, a)"#]]
        .assert_eq(&pins.upstream(None).unwrap_err().to_string());
        let with = parse(&format!("default = \"a\"\n{GOOD}")).unwrap();
        assert_eq!(with.upstream(None).unwrap().name, "a");
        assert_eq!(with.upstream(Some("b")).unwrap().name, "b");
        let one = parse(GOOD.split("[upstream.a]").next().unwrap()).unwrap();
        assert_eq!(one.upstream(None).unwrap().name, "b");
        expect_test::expect![[r#"
            pins.toml:1: default: no [upstream.c] table
              help: name one of: b, a"#]]
        .assert_eq(&err(&format!("default = \"c\"\n{GOOD}")));
    }

    #[track_caller]
    fn err(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert_eq!(
            e.kind(),
            crate::ErrorKind::Input(InputKind::Manifest),
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let short = GOOD.replace("1111111111111111111111111111111111111111", "1111111");
        expect_test::expect![[r#"pins.toml:9: upstream.a.rev: expected a full 40-hex commit id, found "1111111" (branch names, tags and short ids are not pins)"#]]
            .assert_eq(&err(&short));
        let unknown = GOOD.replace("branch = \"main\"", "brnach = \"main\"");
        assert!(
            err(&unknown).starts_with("pins.toml:11"),
            "{}",
            err(&unknown)
        );
        assert!(err(&unknown).contains("brnach"));
        let missing = GOOD.replace("overlays = \"overlays/a\"\n", "");
        assert!(err(&missing).contains("overlays"), "{}", err(&missing));
        let escape = GOOD.replace("\"overlays/a\"", "\"../elsewhere\"");
        expect_test::expect![[r#"pins.toml:10: upstream.a.overlays: expected a folder relative to pins.toml, inside it, found "../elsewhere""#]]
            .assert_eq(&err(&escape));
        let ext = GOOD.replace("/srv/a.git", "ext::sh -c touch% /tmp/pwned");
        assert!(err(&ext).contains("ext:: transport"));
        for helper in ["fd::17", "foo::bar", "git-remote.x+y::/srv/a"] {
            let e = err(&GOOD.replace("/srv/a.git", helper));
            assert!(e.starts_with("pins.toml:8: upstream.a.url:"), "{e}");
        }
        // "::" after a path separator is part of a local path, not a transport.
        parse(&GOOD.replace("/srv/a.git", "/srv/a::b.git")).unwrap();
        expect_test::expect![[r#"
            pins.toml: no [upstream.<name>] table
              help: add one: [upstream.mlx] url = "https://github.com/ml-explore/mlx" rev = "<40-hex commit>" overlays = "overlays/mlx""#]]
        .assert_eq(&err(""));
        assert!(err("[upstream.x]\nurl = 3\n").starts_with("pins.toml:2"));
    }

    const SOURCES: &str = r#"
[upstream.a]
url = "/srv/a.git"
rev = "1111111111111111111111111111111111111111"
overlays = "overlays/a"

[upstream.a.sources.cutlass]
url = "https://example.com/cutlass"
rev = "2222222222222222222222222222222222222222"
tag = "v4.4.2"
paths = ["include"]
backends = ["cuda"]

[upstream.a.sources.cccl]
url = "https://example.com/cccl"
rev = "3333333333333333333333333333333333333333"
layout = "cccl-release"
"#;

    #[test]
    fn sources_are_pinned_like_upstreams() {
        let pins = parse(SOURCES).unwrap();
        let s = &pins.upstreams[0].sources;
        let names: Vec<_> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cccl", "cutlass"]);
        assert_eq!(s[1].tag.as_deref(), Some("v4.4.2"));
        assert_eq!(s[1].paths, ["include"]);
        assert_eq!(s[1].backends, ["cuda"]);
        assert_eq!(s[0].layout.as_deref(), Some("cccl-release"));
        assert_eq!(s[1].line, 7);
    }

    const TEST_SOURCES: &str = r#"
[upstream.a]
url = "/srv/a.git"
rev = "1111111111111111111111111111111111111111"
overlays = "overlays/a"

[upstream.a.sources.nanobind]
url = "https://example.com/nanobind"
rev = "2222222222222222222222222222222222222222"
submodules = { "ext/robin_map" = "robin_map" }
tests = true

[upstream.a.sources.robin_map]
url = "https://example.com/robin-map"
rev = "3333333333333333333333333333333333333333"
tests = true
"#;

    #[test]
    fn test_sources_carry_their_submodules() {
        let pins = parse(TEST_SOURCES).unwrap();
        let s = &pins.upstreams[0].sources;
        assert!(s.iter().all(|s| s.tests));
        assert_eq!(s[0].name, "nanobind");
        assert_eq!(
            s[0].submodules.get("ext/robin_map").map(String::as_str),
            Some("robin_map")
        );
        assert!(!parse(SOURCES).unwrap().upstreams[0].sources[0].tests);
    }

    /// `bench = true` marks a source only the project's benchmarks need; it cannot also be a
    /// test suite's source (an error at the table's line).
    #[test]
    fn bench_sources_are_neither_built_nor_tests() {
        let bench = TEST_SOURCES.replacen("tests = true", "bench = true", 1);
        let s = &parse(&bench).unwrap().upstreams[0].sources;
        assert!(s[0].bench && !s[0].tests, "{:?}", s[0]);
        assert!(!s[1].bench && s[1].tests, "{:?}", s[1]);
        assert!(!parse(SOURCES).unwrap().upstreams[0].sources[0].bench);
        let both = TEST_SOURCES.replacen("tests = true", "tests = true\nbench = true", 1);
        expect_test::expect![[r#"
            pins.toml:7: upstream.a.sources.nanobind: `tests = true` and `bench = true` together: a source is for the upstream's test suites or for the project's benchmarks, not both
              help: keep the one it is for: `tests` sources go to test-upstream, `bench` sources only into the CUDA bundle's deps/"#]]
        .assert_eq(&err(&both));
        let typo = TEST_SOURCES.replacen("tests = true", "bench = 1", 1);
        assert!(err(&typo).starts_with("pins.toml:11"), "{}", err(&typo));
    }

    #[test]
    fn bad_submodules_name_their_line() {
        let unknown = TEST_SOURCES.replace("= \"robin_map\" }", "= \"robinmap\" }");
        expect_test::expect![[r#"
            pins.toml:7: upstream.a.sources.nanobind.submodules: "ext/robin_map" names "robinmap", which is not another source
              help: add [upstream.a.sources.robinmap] or name one of: robin_map"#]]
        .assert_eq(&err(&unknown));
        let itself = TEST_SOURCES.replace("= \"robin_map\" }", "= \"nanobind\" }");
        assert!(err(&itself).contains("names \"nanobind\", which is not another source"));
        let escape = TEST_SOURCES.replace("\"ext/robin_map\" =", "\"../x\" =");
        assert!(
            err(&escape).starts_with("pins.toml:10: upstream.a.sources.nanobind.submodules:"),
            "{}",
            err(&escape)
        );
        let typo = TEST_SOURCES.replace("tests = true", "tests = \"yes\"");
        assert!(err(&typo).starts_with("pins.toml:11"), "{}", err(&typo));
    }

    #[test]
    fn bad_sources_name_their_line() {
        let tag_as_rev = SOURCES.replace("2222222222222222222222222222222222222222", "v4.4.2");
        expect_test::expect![[r#"pins.toml:9: upstream.a.sources.cutlass.rev: expected a full 40-hex commit id, found "v4.4.2" (put the tag in `tag`)"#]]
            .assert_eq(&err(&tag_as_rev));
        let escape = SOURCES.replace("[\"include\"]", "[\"../x\"]");
        assert!(
            err(&escape).starts_with("pins.toml:11: upstream.a.sources.cutlass.paths:"),
            "{}",
            err(&escape)
        );
        let layout = SOURCES.replace("cccl-release", "zip");
        let e = err(&layout);
        assert!(
            e.starts_with("pins.toml:17: upstream.a.sources.cccl.layout: unknown layout \"zip\""),
            "{e}"
        );
        assert!(e.contains("known layouts: cccl-release"), "{e}");
        let helper = SOURCES.replace("https://example.com/cccl", "ext::sh -c x");
        assert!(err(&helper).starts_with("pins.toml:15: upstream.a.sources.cccl.url:"));
        let unknown = SOURCES.replace("tag = ", "tga = ");
        assert!(err(&unknown).contains("tga"), "{}", err(&unknown));
    }

    #[test]
    fn unknown_upstream_lists_known_ones() {
        let pins = parse(GOOD).unwrap();
        let e = pins.upstream(Some("c")).unwrap_err().to_string();
        assert!(e.contains("known upstreams: b, a"), "{e}");
    }
}
