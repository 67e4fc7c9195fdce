use crate::fixture::{Fixture, assert_same_tree};

const TRAILERS: &str = "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted";

fn numbered(n: usize, prefix: &str) -> String {
    (1..=n).map(|i| format!("{prefix} {i}\n")).collect()
}

fn base() -> Fixture {
    Fixture::new(&[
        ("src/a.c", &numbered(20, "line")),
        ("src/b.c", "int b(void) {\n  return 1;\n}\n"),
        ("docs/old.md", "old doc\nstays the same\n"),
        ("tools/run.sh", "#!/bin/sh\necho run\n"),
    ])
}

#[test]
fn exact_apply_equals_git_am() {
    let f = base();
    f.add_overlay(
        "Change a",
        &[(
            "src/a.c",
            Some(&numbered(20, "line").replace("line 10\n", "line ten\n")),
        )],
        TRAILERS,
    );
    f.add_overlay(
        "Change b",
        &[("src/b.c", Some("int b(void) {\n  return 2;\n}\n"))],
        TRAILERS,
    );
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    f.xtask(&["check"]).ok();
}

#[test]
fn new_deleted_renamed_and_mode_changed_files_equal_git_am() {
    let f = base();
    f.add_overlay(
        "Files come and go",
        &[
            ("src/new.c", Some("new file\n")),
            ("docs/old.md", None),
            ("tools/run.sh", Some("#!/bin/sh\necho run fast\n")),
        ],
        TRAILERS,
    );
    // A pure rename (git format-patch -M writes rename headers) and a mode change.
    f.git(&f.work, &["mv", "src/b.c", "src/renamed.c"]);
    f.git(&f.work, &["update-index", "--chmod=+x", "src/a.c"]);
    std::fs::set_permissions(
        f.work.join("src/a.c"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    f.git(
        &f.work,
        &[
            "commit",
            "-q",
            "-m",
            "Rename b\n\nWhy: test.\n\nOverlay-Kind: local-only",
        ],
    );
    let name = f.format_patch_head();
    let text = f.read(f.root.join("overlays/up").join(&name));
    assert!(
        text.contains("rename from src/b.c") && text.contains("new mode 100755"),
        "{text}"
    );
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    f.xtask(&["check"]).ok();
}

#[test]
fn crlf_and_missing_final_newline_equal_git_am() {
    let f = Fixture::new(&[
        ("win.txt", "one\r\ntwo\r\nthree\r\n"),
        ("tail.txt", "a\nb\nc"),
    ]);
    f.add_overlay(
        "Edit odd files",
        &[
            ("win.txt", Some("one\r\nTWO\r\nthree\r\n")),
            ("tail.txt", Some("a\nb\nC")),
        ],
        TRAILERS,
    );
    f.add_overlay(
        "Add a newline",
        &[("tail.txt", Some("a\nb\nC\n"))],
        TRAILERS,
    );
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    assert_eq!(f.read(dir.join("win.txt")), "one\r\nTWO\r\nthree\r\n");
    f.xtask(&["check"]).ok();
}

#[test]
fn offset_is_applied_and_reported() {
    let f = base();
    f.add_overlay(
        "Change a",
        &[(
            "src/a.c",
            Some(&numbered(20, "line").replace("line 15\n", "line fifteen\n")),
        )],
        TRAILERS,
    );
    // Upstream moves on: two lines inserted at the top; the overlay now applies 2 lines lower.
    let moved = format!("top 1\ntop 2\n{}", numbered(20, "line"));
    let rev = f.commit_upstream(&[("src/a.c", &moved)], "upstream grows");
    f.write_pins(&rev);
    let dir = f.t().join("tree");
    let out = f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert!(
        out.stdout
            .contains("offset: src/a.c hunk #1 applied at line 14 (recorded 12, +2)"),
        "{}",
        out.stdout
    );
    assert!(f.read(dir.join("src/a.c")).contains("line fifteen\n"));
    let out = f.xtask(&["check"]).code(1);
    assert!(out.stdout.contains("OFFSET"), "{}", out.stdout);
}

#[test]
fn context_mismatch_by_one_character_is_refused() {
    let f = base();
    f.add_overlay(
        "Change a",
        &[(
            "src/a.c",
            Some(&numbered(20, "line").replace("line 10\n", "line ten\n")),
        )],
        TRAILERS,
    );
    let rev = f.commit_upstream(
        &[(
            "src/a.c",
            &numbered(20, "line").replace("line 9\n", "line 9 \n"),
        )],
        "whitespace",
    );
    f.write_pins(&rev);
    let dir = f.t().join("tree");
    let out = f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).code(2);
    assert!(
        out.stderr.contains("hunk #1") && out.stderr.contains("\"line 9 \""),
        "{}",
        out.stderr
    );
    assert!(
        !dir.exists(),
        "nothing may be written when an overlay does not apply"
    );
    let out = f.xtask(&["check"]).code(1);
    assert!(out.stdout.contains("CONFLICT"), "{}", out.stdout);
}

#[test]
fn ambiguous_context_is_refused() {
    // The hunk's whole pre-image (3 lines of context around the change) is one repeated block.
    let block = "x\ny\nz\nw\nv\nu\nt\n";
    let f = Fixture::new(&[("f.txt", &format!("a\nb\nc\nd\n{block}{block}"))]);
    f.add_overlay(
        "Change the first block",
        &[(
            "f.txt",
            Some(&format!("a\nb\nc\nd\nx\ny\nz\nW\nv\nu\nt\n{block}")),
        )],
        TRAILERS,
    );
    // Upstream prepends lines: the recorded line no longer matches and both blocks qualify.
    let rev = f.commit_upstream(
        &[("f.txt", &format!("p\nq\na\nb\nc\nd\n{block}{block}"))],
        "prepend",
    );
    f.write_pins(&rev);
    let out = f
        .xtask(&["apply", "--dir", f.t().join("tree").to_str().unwrap()])
        .code(2);
    assert!(
        out.stderr
            .contains("matches at several lines (7, 14); refusing to guess"),
        "{}",
        out.stderr
    );
}

#[test]
fn series_order_matters() {
    let f = base();
    let first = f.add_overlay(
        "First",
        &[("src/b.c", Some("int b(void) {\n  return 2;\n}\n"))],
        TRAILERS,
    );
    let second = f.add_overlay(
        "Second",
        &[("src/b.c", Some("int b(void) {\n  return 3;\n}\n"))],
        TRAILERS,
    );
    f.xtask(&["apply"]).ok();
    std::fs::write(
        f.root.join("overlays/up/series"),
        format!("{second}\n{first}\n"),
    )
    .unwrap();
    let out = f
        .xtask(&["apply", "--dir", f.t().join("other").to_str().unwrap()])
        .code(2);
    assert!(out.stderr.contains(&second), "{}", out.stderr);
}

#[test]
fn unchanged_files_keep_their_mtime() {
    let f = base();
    f.add_overlay(
        "Change b",
        &[("src/b.c", Some("int b(void) {\n  return 2;\n}\n"))],
        TRAILERS,
    );
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    let before = std::fs::metadata(dir.join("src/a.c"))
        .unwrap()
        .modified()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    f.add_overlay(
        "Change b again",
        &[("src/b.c", Some("int b(void) {\n  return 3;\n}\n"))],
        TRAILERS,
    );
    let out = f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert!(
        out.stdout
            .contains("wrote 1 file(s), removed 0, unchanged 3"),
        "{}",
        out.stdout
    );
    assert_eq!(
        before,
        std::fs::metadata(dir.join("src/a.c"))
            .unwrap()
            .modified()
            .unwrap()
    );
    assert_same_tree(&dir, &f.git_am_tree());
}

#[test]
fn a_directory_not_written_by_apply_is_refused() {
    let f = base();
    let dir = f.t().join("mine");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "precious").unwrap();
    let out = f
        .xtask(&["apply", "--dir", dir.to_str().unwrap(), "--force"])
        .code(2);
    assert!(
        out.stderr.contains("not written by apply"),
        "{}",
        out.stderr
    );
    assert_eq!(f.read(dir.join("notes.txt")), "precious");
}

#[test]
fn insteadof_rewriting_is_honoured_and_keys_the_cache() {
    let f = base();
    f.add_overlay(
        "Change b",
        &[("src/b.c", Some("int b(void) {\n  return 2;\n}\n"))],
        TRAILERS,
    );
    // pins.toml keeps a URL this machine cannot reach; git's insteadOf points it at the fixture.
    let pins = f.read(f.root.join("pins.toml")).replace(
        &format!("url = \"{}\"", f.upstream.display()),
        "url = \"https://example.invalid/up.git\"",
    );
    std::fs::write(f.root.join("pins.toml"), pins).unwrap();
    let out = f
        .xtask(&[
            "apply",
            "--dir",
            f.t().join("unreachable").to_str().unwrap(),
        ])
        .code(2);
    assert!(
        out.stderr.contains("https://example.invalid/up.git") && out.stderr.contains("insteadOf"),
        "{}",
        out.stderr
    );
    let rule = format!(
        "[url \"{}\"]\n\tinsteadOf = https://example.invalid/up.git\n",
        f.upstream.display()
    );
    for cfg in ["gitconfig", ".gitconfig"] {
        let p = f.t().join(cfg);
        let old = std::fs::read_to_string(&p).unwrap_or_default();
        std::fs::write(&p, format!("{old}{rule}")).unwrap();
    }
    let dir = f.t().join("tree");
    f.xtask(&["apply", "--dir", dir.to_str().unwrap()]).ok();
    assert_same_tree(&dir, &f.git_am_tree());
    // The failed attempt left no cache entry (a failed first fetch removes the entry it made), so
    // one entry, keyed by the rewritten URL; a second apply reuses it without fetching.
    let entries = std::fs::read_dir(f.cache.join("upstreams"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "git")
        })
        .count();
    assert_eq!(
        entries, 1,
        "one cache per effective URL, none for the failed fetch"
    );
    f.xtask(&["apply", "--dir", f.t().join("tree2").to_str().unwrap()])
        .ok();
}
