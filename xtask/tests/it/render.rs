//! The engine writes overlays exactly as `git format-patch` does: re-render git's own patches from
//! the parsed model and compare byte for byte (index abbreviations aside, which git varies itself).

use crate::fixture::Fixture;
use overlay::render::render_patch_body;
use overlay::series::Series;
use overlay::upstream::UpstreamRepo;

fn normalize_index(s: &str) -> String {
    s.lines()
        .map(|l| match l.strip_prefix("index ") {
            Some(rest) => {
                let mode = rest
                    .split_once(' ')
                    .map(|(_, m)| format!(" {m}"))
                    .unwrap_or_default();
                format!("index X..Y{mode}")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

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
        let body = render_patch_body(
            &ov.files,
            &before,
            &tree,
            ov.signature.as_deref().unwrap(),
            &repo,
        )
        .unwrap();
        let ours = normalize_index(&format!("{}{body}", ov.prelude));
        let git = normalize_index(&ov.raw);
        assert_eq!(ours, git, "{}", ov.name);
    }
}
