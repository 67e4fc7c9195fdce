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
    /// What the [`Extension`]s that claim keys of this table made of them (a fork's build
    /// settings, say), key by key: opaque to the engine, shown by `status`. Empty when loaded with
    /// [`Extras::Unread`].
    #[serde(flatten)]
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// 1-based line of the `[upstream.<name>]` table, for messages.
    #[serde(skip)]
    pub line: usize,
}

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

/// The engine's keys of an `[upstream.<name>]` table. Any other key must be claimed by an
/// [`Extension`] (checked by [`claimed_keys`]), so serde here ignores them.
#[derive(Deserialize)]
struct RawUpstream {
    url: Spanned<String>,
    rev: Spanned<String>,
    overlays: Spanned<String>,
    branch: Option<Spanned<String>>,
}

/// The keys [`RawUpstream`] reads.
const ENGINE_KEYS: &[&str] = &["url", "rev", "overlays", "branch"];

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
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Builds the error for `key` at `span` of one table.
pub type KeyError<'a> = &'a dyn Fn(std::ops::Range<usize>, &str, String) -> Error;

/// The error of a key of the table `table` (`upstream.mlx`): at the line of its span, named in
/// full (`upstream.mlx.rev: ...`).
pub fn key_error<'a>(
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
pub fn checked_url(url: &Spanned<String>, err: KeyError<'_>) -> Result<String> {
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
pub fn checked_rev(rev: &Spanned<String>, err: KeyError<'_>, hint: &str) -> Result<String> {
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

/// The 1-based line of byte `offset` of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// One `[upstream.<name>]` table, validated: its name, URL, pin, overlays folder (inside the
/// project) and branch, and the other keys as `extras` says.
fn parse_upstream(
    path: &Path,
    text: &str,
    name: String,
    table: Spanned<RawUpstream>,
    extras: &Extras<'_>,
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
    let settings = match extras {
        Extras::Unread => serde_json::Map::new(),
        Extras::Checked(exts) => {
            let mut settings = serde_json::Map::new();
            for ext in *exts {
                settings.extend(ext.check(path, text, &name)?);
            }
            settings
        }
    };
    Ok(Upstream {
        name,
        url,
        rev,
        overlays,
        branch,
        settings,
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

/// Keys of `[upstream.<name>]` beyond the engine's own (`url`, `rev`, `overlays`, `branch`) that
/// a fork's tools own: build settings, say. The engine does not read them; the extension that
/// claims them checks them whenever pins.toml is loaded, and `status` shows what it makes of them.
/// Errors name pins.toml's line like the engine's own ([`pins_error`], [`key_error`]).
pub trait Extension: Send + Sync {
    /// The keys of `[upstream.<name>]` it claims (e.g. `sources`).
    fn keys(&self) -> &[&str];
    /// Checks its keys of `[upstream.<upstream>]` in `text` (pins.toml, read from `path`) and
    /// returns what [`Upstream::settings`] holds for them, key by key.
    fn check(
        &self,
        path: &Path,
        text: &str,
        upstream: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>>;
}

/// How a load treats the keys of `[upstream.<name>]` beyond the engine's own.
#[derive(Clone, Copy)]
pub enum Extras<'a> {
    /// Each is claimed and checked by one of these extensions; any other key is an error.
    Checked(&'a [&'a dyn Extension]),
    /// Any key, unread and unchecked: for a reader that needs only the engine's keys, such as
    /// the pins.toml of an older commit or a tool that only wants the pin.
    Unread,
}

/// The table under `key` of `t`, if it is one.
fn sub_table<'a, 'i>(t: &'a toml::de::DeTable<'i>, key: &str) -> Option<&'a toml::de::DeTable<'i>> {
    let (_, v) = t.iter().find(|(k, _)| k.get_ref() == key)?;
    match v.get_ref() {
        toml::de::DeValue::Table(t) => Some(t),
        _ => None,
    }
}

/// Every key of every `[upstream.<name>]` in `text` is the engine's or claimed by one of `exts`
/// (else an error at the first such key's line naming the keys there may be). Checked before the
/// engine's keys are read, so a misspelt `rev` is named as such, not as a missing `rev`; a text
/// that is not TOML passes here, for the parse to report.
fn claimed_keys(path: &Path, text: &str, exts: &[&dyn Extension]) -> Result<()> {
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return Ok(());
    };
    let doc = doc.into_inner();
    let claimed = |k: &str| ENGINE_KEYS.contains(&k) || exts.iter().any(|e| e.keys().contains(&k));
    let unclaimed = sub_table(&doc, "upstream")
        .into_iter()
        .flat_map(|ups| ups.iter())
        .filter_map(|(name, t)| match t.get_ref() {
            toml::de::DeValue::Table(t) => Some((name, t)),
            _ => None,
        })
        .flat_map(|(name, t)| t.keys().map(move |k| (name, k)))
        .filter(|(_, k)| !claimed(k.get_ref()))
        .min_by_key(|(_, k)| k.span().start);
    let Some((upstream, key)) = unclaimed else {
        return Ok(());
    };
    let known: Vec<&str> = ENGINE_KEYS
        .iter()
        .copied()
        .chain(exts.iter().flat_map(|e| e.keys().iter().copied()))
        .collect();
    Err(pins_error(
        path,
        Some(line_of(text, key.span().start)),
        format!(
            "upstream.{}.{}: unknown key, expected one of {}",
            upstream.get_ref(),
            key.get_ref(),
            known.join(", ")
        ),
    )
    .with_help(format!(
        "{}a key the fork's own tools read is claimed by their overlay::manifest::Extension (overlay_cli::Hooks::extensions)",
        match crate::help::did_you_mean(key.get_ref(), known.iter().copied()) {
            Some(k) => format!("did you mean `{k}`? "),
            None => "check its spelling; ".into(),
        }
    )))
}

impl Pins {
    /// Loads `<root>/pins.toml`, its other keys as `extras` says.
    pub fn load(root: &Path, extras: &Extras<'_>) -> Result<Pins> {
        let path = root.join(PINS_FILE);
        let text = std::fs::read_to_string(&path).at(&path)?;
        Pins::parse(&path, &text, extras)
    }

    /// Parses and validates `text`, read from `path` (named in errors), its other keys as
    /// `extras` says.
    pub fn parse(path: &Path, text: &str, extras: &Extras<'_>) -> Result<Pins> {
        if let Extras::Checked(exts) = extras {
            claimed_keys(path, text, exts)?;
        }
        let raw: RawPins = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            pins_error(path, line, e.message().trim().to_string())
        })?;
        let mut tables: Vec<(String, Spanned<RawUpstream>)> = raw.upstream.into_iter().collect();
        // BTreeMap loses file order; spans give it back.
        tables.sort_by_key(|(_, t)| t.span().start);
        let upstreams = tables
            .into_iter()
            .map(|(name, table)| parse_upstream(path, text, name, table, extras))
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
pub fn pins_error(
    path: impl AsRef<Path>,
    line: Option<usize>,
    message: impl Into<String>,
) -> Error {
    Error::input(path, line, message).of(InputKind::Manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Pins> {
        Pins::parse(Path::new("pins.toml"), text, &Extras::Checked(&[]))
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
        // A misspelt key the engine needs is named as written, not as the key that is missing,
        // and the key meant is suggested.
        let revv = GOOD.replace("rev = \"1111", "revv = \"1111");
        assert!(
            err(&revv).contains("help: did you mean `rev`?"),
            "{}",
            err(&revv)
        );
        assert!(
            err(&revv).starts_with("pins.toml:9: upstream.a.revv: unknown key, expected one of url, rev, overlays, branch\n"),
            "{}",
            err(&revv)
        );
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

    /// A key beyond the engine's: refused at its line unless an extension claims it; a claiming
    /// extension's checks run and its result is the upstream's settings; `Unread` takes any key.
    #[test]
    fn other_keys_are_claimed_by_an_extension() {
        struct Lines;
        impl Extension for Lines {
            fn keys(&self) -> &[&str] {
                &["lines"]
            }
            fn check(
                &self,
                path: &Path,
                text: &str,
                up: &str,
            ) -> Result<serde_json::Map<String, serde_json::Value>> {
                let n = text.lines().count();
                if up == "b" {
                    return Err(pins_error(
                        path,
                        Some(n),
                        format!("upstream.{up}.lines: refused"),
                    ));
                }
                Ok(serde_json::Map::from_iter([("lines".into(), n.into())]))
            }
        }
        let with = GOOD.replace("branch = \"main\"", "branch = \"main\"\nlines = 3");
        let e = err(&with);
        assert!(e.starts_with("pins.toml:12: upstream.a.lines: unknown key, expected one of url, rev, overlays, branch"), "{e}");
        let pins = Pins::parse(Path::new("pins.toml"), &with, &Extras::Unread).unwrap();
        assert!(pins.upstreams[1].settings.is_empty());
        let ext: &[&dyn Extension] = &[&Lines];
        let only_a = with
            .split_once("[upstream.a]")
            .map(|(_, a)| format!("[upstream.a]{a}"))
            .unwrap();
        let pins = Pins::parse(Path::new("pins.toml"), &only_a, &Extras::Checked(ext)).unwrap();
        assert_eq!(pins.upstreams[0].settings["lines"], 6);
        let json = serde_json::to_value(&pins.upstreams[0]).unwrap();
        assert_eq!(json["lines"], 6, "{json}");
        let e = Pins::parse(Path::new("pins.toml"), &with, &Extras::Checked(ext)).unwrap_err();
        assert_eq!(e.to_string(), "pins.toml:12: upstream.b.lines: refused");
    }

    #[test]
    fn unknown_upstream_lists_known_ones() {
        let pins = parse(GOOD).unwrap();
        let e = pins.upstream(Some("c")).unwrap_err().to_string();
        assert!(e.contains("known upstreams: b, a"), "{e}");
    }
}
