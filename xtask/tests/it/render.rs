//! The engine writes overlays exactly as `git format-patch` does: re-render git's own patches from
//! the parsed model and compare byte for byte (index lines at the width git used: a rewrite keeps
//! an overlay's abbreviation).

use crate::fixture::Fixture;
use overlay::render::render_patch_body;
use overlay::series::Series;
use overlay::upstream::UpstreamRepo;

#[test]
fn rendering_matches_git_format_patch() {
    let long = "a/very/long/directory/name/that/goes/on/and/on/and/on/and/on/until/it/wraps/file.c";
    let many: String = (0..200).map(|i| format!("row {i}\n")).collect();
    let f = Fixture::new(&[
        ("src/a.c", "one\ntwo\nthree\n"),
        ("gone.txt", "bye\n"),
        (long, "x\n"),
        ("big.txt", &many),
        ("nl.txt", "a\nb"),
    ]);
    f.add_overlay(
        "Small",
        &[
            ("src/a.c", Some("one\n2\nthree\n")),
            ("new/file.txt", Some("hello\n")),
        ],
        "Overlay-Kind: upstreamable",
    );
    f.add_overlay(
        "Deletes and long names",
        &[("gone.txt", None), (long, Some("y\n"))],
        "Overlay-Kind: local-only",
    );
    let changed: String = (0..200)
        .map(|i| {
            if i % 3 == 0 {
                format!("ROW {i}\n")
            } else {
                format!("row {i}\n")
            }
        })
        .collect();
    f.add_overlay(
        "Scaled diffstat",
        &[("big.txt", Some(&changed)), ("nl.txt", Some("a\nB"))],
        "Overlay-Kind: local-only",
    );
    f.git(&f.work, &["update-index", "--chmod=+x", "src/a.c"]);
    f.git(
        &f.work,
        &[
            "commit",
            "-q",
            "-m",
            "Mode\n\nWhy.\n\nOverlay-Kind: local-only",
        ],
    );
    f.format_patch_head();
    // A modification of an executable file: git writes its mode on the index line.
    f.add_overlay(
        "Edit the executable",
        &[("src/a.c", Some("one\n2\n3\n"))],
        "Overlay-Kind: local-only",
    );

    let series = Series::load(&f.root.join("overlays/up")).unwrap();
    let repo = UpstreamRepo::open(
        &f.cache,
        "up",
        f.upstream.to_str().unwrap(),
        &f.pin,
        &mut |_| {},
    )
    .unwrap();
    let mut tree = repo.tree_at(git2::Oid::from_str(&f.pin).unwrap()).unwrap();
    for ov in &series.overlays {
        let before = tree.clone();
        tree.apply_overlay(ov, &repo).unwrap();
        // At the width git used, the index lines are git's too: byte for byte.
        // (A pure rename has no index line.)
        let width = overlay::render::index_width(&ov.raw).unwrap_or(overlay::render::ABBREV);
        let body = render_patch_body(
            &ov.files,
            &before,
            &tree,
            ov.signature.as_deref().unwrap(),
            width,
            &repo,
        )
        .unwrap();
        assert_eq!(format!("{}{body}", ov.prelude), ov.raw, "{}", ov.name);
    }
}

/// A rewrite keeps the overlay's index abbreviation: a patch from `git format-patch` (7 digits in
/// a small repository) carried across a bump that moves its hunk keeps 7-digit ids, not 12.
#[test]
fn a_rewrite_keeps_the_index_abbreviation() {
    let f = Fixture::new(&[("src/a.c", "one\ntwo\nthree\nfour\n")]);
    let name = f.add_overlay(
        "Change three",
        &[("src/a.c", Some("one\ntwo\n3\nfour\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    let path = f.root.join("overlays/up").join(&name);
    let before = f.read(&path);
    assert_eq!(overlay::render::index_width(&before), Some(7), "{before}");
    let next = f.commit_upstream(&[("src/a.c", "zero\none\ntwo\nthree\nfour\n")], "prepend");
    f.xtask(&["bump-pin", &next]).ok();
    let after = f.read(&path);
    assert_ne!(
        after, before,
        "the bump moved the hunk: the overlay was rewritten"
    );
    assert_eq!(overlay::render::index_width(&after), Some(7), "{after}");
}
