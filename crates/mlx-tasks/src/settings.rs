//! The build settings of pins.toml's `[upstream.<name>]` tables, which the engine does not read:
//! `fetchcontent` (FetchContent redirections) and `sources` (pinned sources the upstream's build
//! would fetch). [`BuildSettingsExt`] claims and checks them for the engine in every load of
//! pins.toml ([`crate::extensions`]); [`of`] gives them to the build tasks.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use anyhow::Context as _;
use overlay::manifest::{
    Extension, Pins, Upstream, checked_rev, checked_url, is_plain_name, key_error, line_of,
    pins_error,
};
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// The build settings of one upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BuildSettings {
    /// FetchContent redirections for the build (name -> dir or URL).
    pub fetchcontent: BTreeMap<String, String>,
    /// Pinned sources the upstream's build would fetch (`[upstream.<name>.sources.<dep>]`), in
    /// name order; the build uses them instead of the network.
    pub sources: Vec<Source>,
}

/// One `[upstream.<name>.sources.<dep>]` table: a source the upstream's build fetches, pinned
/// like an upstream (URL + full commit) and handed to CMake as `FETCHCONTENT_SOURCE_DIR_<DEP>`
/// (or, with `bench`, a source only the project's benchmarks build).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// 1-based line of the table in pins.toml, for messages.
    #[serde(skip)]
    pub line: usize,
}

/// The layouts `Source::layout` may name.
pub const SOURCE_LAYOUTS: &[&str] = &["cccl-release"];

/// The build settings of `up` in `pins` (its file read again: the engine keeps only what
/// `status` shows of them).
pub fn of(pins: &Pins, up: &Upstream) -> anyhow::Result<BuildSettings> {
    let text = std::fs::read_to_string(&pins.path)
        .with_context(|| format!("reading {}", pins.path.display()))?;
    Ok(parse(&pins.path, &text, &up.name)?)
}

/// The keys [`BuildSettingsExt`] claims.
const KEYS: &[&str] = &["fetchcontent", "sources"];

/// The [`Extension`] that claims `fetchcontent` and `sources` and checks them.
pub struct BuildSettingsExt;

impl Extension for BuildSettingsExt {
    fn keys(&self) -> &[&str] {
        KEYS
    }

    fn check(
        &self,
        path: &Path,
        text: &str,
        upstream: &str,
    ) -> overlay::Result<serde_json::Map<String, serde_json::Value>> {
        match serde_json::to_value(parse(path, text, upstream)?) {
            Ok(serde_json::Value::Object(json)) => Ok(json),
            other => unreachable!("build settings serialize to an object, not {other:?}"),
        }
    }
}

/// The build keys of every `[upstream.<name>]` (the engine's keys are its to check).
#[derive(Deserialize)]
struct RawPins {
    #[serde(default)]
    upstream: BTreeMap<String, RawBuild>,
}

#[derive(Deserialize)]
struct RawBuild {
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

/// Parses and checks the build settings of `[upstream.<up>]` in `text` (pins.toml, read from
/// `path`): errors name the file, line and key, as the engine's do.
pub fn parse(path: &Path, text: &str, up: &str) -> overlay::Result<BuildSettings> {
    let mut raw: RawPins = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        pins_error(path, line, e.message().trim().to_string())
    })?;
    let Some(raw) = raw.upstream.remove(up) else {
        return Ok(BuildSettings::default());
    };
    let fetchcontent = raw
        .fetchcontent
        .into_iter()
        .map(|(k, v)| (k, v.into_inner()))
        .collect();
    let sources = raw
        .sources
        .into_iter()
        .map(|(dep, t)| parse_source(path, text, up, dep, t))
        .collect::<overlay::Result<Vec<_>>>()?;
    check_submodules(path, up, &sources)?;
    Ok(BuildSettings {
        fetchcontent,
        sources,
    })
}

/// Validates one `[upstream.<up>.sources.<dep>]` table.
fn parse_source(
    path: &Path,
    text: &str,
    up: &str,
    dep: String,
    table: Spanned<RawSource>,
) -> overlay::Result<Source> {
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
fn check_submodules(path: &Path, up: &str, sources: &[Source]) -> overlay::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use overlay::manifest::Extras;

    fn parse(text: &str) -> overlay::Result<Pins> {
        Pins::parse(
            Path::new("pins.toml"),
            text,
            &Extras::Checked(&[&BuildSettingsExt]),
        )
    }

    #[track_caller]
    fn err(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert_eq!(
            e.kind(),
            overlay::ErrorKind::Input(overlay::InputKind::Manifest),
            "{e}"
        );
        e.to_string()
    }

    /// The sources of upstream `a` in `text`, which the engine's load accepted.
    fn sources(text: &str) -> Vec<Source> {
        parse(text).unwrap();
        super::parse(Path::new("pins.toml"), text, "a")
            .unwrap()
            .sources
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
        let s = &sources(SOURCES);
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
        let s = &sources(TEST_SOURCES);
        assert!(s.iter().all(|s| s.tests));
        assert_eq!(s[0].name, "nanobind");
        assert_eq!(
            s[0].submodules.get("ext/robin_map").map(String::as_str),
            Some("robin_map")
        );
        assert!(!sources(SOURCES)[0].tests);
    }

    /// `bench = true` marks a source only the project's benchmarks need; it cannot also be a
    /// test suite's source (an error at the table's line).
    #[test]
    fn bench_sources_are_neither_built_nor_tests() {
        let bench = TEST_SOURCES.replacen("tests = true", "bench = true", 1);
        let s = &sources(&bench);
        assert!(s[0].bench && !s[0].tests, "{:?}", s[0]);
        assert!(!s[1].bench && s[1].tests, "{:?}", s[1]);
        assert!(!sources(SOURCES)[0].bench);
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
}
