//! Laws of the resolution audit (`overlay::audit`) on random texts, each counting its cases so a
//! vacuous run fails:
//!
//! - a new version that keeps every line (it only inserts lines, anywhere) is silent;
//! - one that drops any one protected line (an earlier overlay's, or one upstream added after the
//!   base) with nothing put in its place is refused with that line named and its owner right;
//! - a confirmation trailer of the owner accepts exactly that loss.
//!
//! The alphabet repeats lines on purpose (`x();`, `}`), so diff alignment has choices to make.

use std::cell::Cell;

use overlay::apply::Text;
use overlay::audit::{
    Confirmed, FileAudit, LossKind, Origin, Owner, attribute, audit_file, owners,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const COMMON: [&str; 4] = ["x();", "}", "if (a) {", "y = 1;"];

fn text(lines: &[String]) -> Text {
    Text::parse(&lines.iter().map(|l| format!("{l}\n")).collect::<String>())
}

/// A base, upstream's pin (the base with unique lines `up<n>();` inserted), and an earlier
/// overlay's result (the pin with unique lines `ov<n>();` inserted).
#[derive(Debug, Clone)]
struct Case {
    base: Vec<String>,
    pin: Vec<String>,
    pre: Vec<String>,
    /// Where the new version inserts lines of its own (index into `pre`, count).
    inserts: Vec<(usize, usize)>,
    /// Which protected line of `pre` the lossy version drops (index among protected lines).
    drop: usize,
}

fn insert_unique(v: &[String], at: &[usize], tag: &str) -> Vec<String> {
    let mut out = v.to_vec();
    let mut at: Vec<usize> = at.iter().map(|a| a % (out.len() + 1)).collect();
    at.sort_unstable();
    for (k, a) in at.iter().enumerate().rev() {
        out.insert(*a, format!("{tag}{k}();"));
    }
    out
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(prop::sample::select(COMMON.to_vec()), 0..8),
        prop::collection::vec(any::<usize>(), 0..4),
        prop::collection::vec(any::<usize>(), 0..4),
        prop::collection::vec((any::<usize>(), 1..3usize), 0..3),
        any::<usize>(),
    )
        .prop_map(|(base, up, ov, inserts, drop)| {
            let base: Vec<String> = base.into_iter().map(String::from).collect();
            let pin = insert_unique(&base, &up, "up");
            let pre = insert_unique(&pin, &ov, "ov");
            Case {
                base,
                pin,
                pre,
                inserts,
                drop,
            }
        })
}

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(400);
    TestRunner::new(Config {
        cases,
        ..Config::default()
    })
}

/// The audit of `post` over the case's `pre`, attributed with `confirmed`.
fn audit(c: &Case, post: &[String], confirmed: &Confirmed) -> Vec<overlay::audit::Loss> {
    let (base, pin, pre, post) = (text(&c.base), text(&c.pin), text(&c.pre), text(post));
    let own = owners(&pin, &[("0001-earlier.patch", &pre)]).unwrap();
    let q = FileAudit {
        path: "f.c",
        base: Some(&base),
        pre: &pre,
        owners: &own,
        post: &post,
        own_removed: &[],
    };
    let raw = audit_file(&q).unwrap();
    attribute(None, "f.c", &raw, confirmed).unwrap()
}

#[test]
fn keeping_every_line_is_silent() {
    let nonvacuous = Cell::new(0);
    runner()
        .run(&case(), |c| {
            let mut post = c.pre.clone();
            for (k, (at, n)) in c.inserts.iter().enumerate() {
                let at = at % (post.len() + 1);
                for j in 0..*n {
                    post.insert(at, format!("fork{k}_{j}();"));
                }
            }
            nonvacuous.set(nonvacuous.get() + usize::from(post != c.pre && c.pre != c.base));
            let losses = audit(&c, &post, &Confirmed::default());
            prop_assert!(losses.is_empty(), "{losses:?}");
            Ok(())
        })
        .unwrap();
    assert!(
        nonvacuous.get() > 100,
        "only {} cases inserted over protected lines",
        nonvacuous.get()
    );
}

#[test]
fn dropping_a_protected_line_is_named_with_its_owner_and_a_trailer_accepts_it() {
    let dropped = Cell::new(0);
    runner()
        .run(&case(), |c| {
            let protected: Vec<usize> = (0..c.pre.len())
                .filter(|&i| c.pre[i].starts_with("up") || c.pre[i].starts_with("ov"))
                .collect();
            if protected.is_empty() {
                return Ok(());
            }
            let i = protected[c.drop % protected.len()];
            let mut post = c.pre.clone();
            let gone = post.remove(i);
            dropped.set(dropped.get() + 1);
            let losses = audit(&c, &post, &Confirmed::default());
            prop_assert_eq!(losses.len(), 1, "{:?}", losses);
            let l = &losses[0];
            prop_assert_eq!(
                (l.kind, l.text.as_str(), l.line),
                (LossKind::Dropped, gone.as_str(), i + 1)
            );
            let by_overlay = gone.starts_with("ov");
            prop_assert_eq!(matches!(l.origin, Origin::Overlay { .. }), by_overlay);
            prop_assert!(!l.accepted);
            let confirmed = if by_overlay {
                Confirmed {
                    overlays: ["0001-earlier.patch".to_string()].into(),
                    ..Confirmed::default()
                }
            } else {
                // Without a history an upstream line has no commit a trailer could name: it
                // stays open (with one, `Reverts-Upstream: <commit>`; xtask/tests/it/audit.rs).
                Confirmed {
                    commits: [git2::Oid::ZERO_SHA1].into(),
                    ..Confirmed::default()
                }
            };
            let accepted = audit(&c, &post, &confirmed);
            prop_assert_eq!(accepted.len(), 1);
            prop_assert_eq!(accepted[0].accepted, by_overlay);
            Ok(())
        })
        .unwrap();
    assert!(
        dropped.get() > 200,
        "only {} cases dropped a line",
        dropped.get()
    );
}

#[test]
fn the_owner_of_a_line_follows_the_chain() {
    let pin = text(&["a".into(), "b".into()]);
    let one = text(&["a".into(), "o1".into(), "b".into()]);
    let two = text(&["o2".into(), "a".into(), "o1".into(), "b".into()]);
    let own = owners(&pin, &[("1", &one), ("2", &two)]).unwrap();
    assert_eq!(
        own,
        [
            Owner::Overlay("2".into()),
            Owner::Upstream(0),
            Owner::Overlay("1".into()),
            Owner::Upstream(1)
        ]
    );
}
