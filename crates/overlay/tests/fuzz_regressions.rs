//! Inputs the fuzz targets in `crates/overlay/fuzz` found, minimized by hand, each checking the
//! invariant the target asserts. See docs/reliability.md, "Fuzzing".

mod common;

use std::path::Path;

use overlay::apply::{Failure, Text, apply_hunks};
use overlay::patch::{FilePatch, parse_overlay};

fn overlay_with(file_diff: &str) -> String {
    format!(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n\
         From: A <a@example.com>\nSubject: [PATCH] x\n\nOverlay-Kind: local-only\n---\n\n\
         {file_diff}-- \n2.43.0\n\n"
    )
}

/// `patch_parse`: a lone "new mode" line made `Tree::apply` change the mode, but rendering the
/// overlay again wrote no mode line at all, so the change silently disappeared. Half a mode change,
/// or one to the same mode, is refused now; a whole one still parses.
#[test]
fn half_a_mode_change_is_refused() {
    let p = Path::new("x.patch");
    for half in [
        "diff --git a/m.sh b/m.sh\nnew mode 100755\n",
        "diff --git a/m.sh b/m.sh\nold mode 100644\n",
        "diff --git a/m.sh b/m.sh\nold mode 100644\nnew mode 100644\n",
    ] {
        let e = parse_overlay("x.patch", p, &overlay_with(half)).unwrap_err();
        assert_eq!(
            e.kind(),
            overlay::ErrorKind::Input(overlay::InputKind::Patch),
            "{e}"
        );
        assert!(e.to_string().contains("mode"), "{e}");
    }
    let whole = "diff --git a/m.sh b/m.sh\nold mode 100644\nnew mode 100755\n";
    let ov = parse_overlay("x.patch", p, &overlay_with(whole)).unwrap();
    assert_eq!(
        (ov.files[0].old_mode, ov.files[0].new_mode),
        (Some(0o100644), Some(0o100755))
    );
}

/// `patch_parse`: git quotes each name of a `diff --git` line on its own, so a plain old name can
/// stand next to a quoted new one (a control character in the new name); the renderer writes that,
/// and the parser could not read it back.
#[test]
fn diff_git_line_with_only_the_new_name_quoted() {
    let p = Path::new("x.patch");
    let diff =
        "diff --git a/f \"b/g\\022h\"\nsimilarity index 0%\nrename from f\nrename to \"g\\022h\"\n";
    let ov = parse_overlay("x.patch", p, &overlay_with(diff)).unwrap();
    assert_eq!(ov.files[0].old_path.as_deref(), Some("f"));
    assert_eq!(ov.files[0].new_path.as_deref(), Some("g\u{12}h"));
}

/// `patch_parse`: a quoted name holding `\" ` (an escaped quote before a space) was cut at that
/// escaped quote, so the renderer's own output did not parse.
#[test]
fn quoted_name_with_an_escaped_quote_and_a_space() {
    let p = Path::new("x.patch");
    let diff = concat!(
        "diff --git \"a/d \\\" x\" \"b/d \\\" x\"\n",
        "new file mode 100644\n",
        "index 000000000000..000000000000\n",
    );
    let ov = parse_overlay("x.patch", p, &overlay_with(diff)).unwrap();
    assert_eq!(ov.files[0].new_path.as_deref(), Some("d \" x"));
}

/// `patch_parse`: an unquoted name holding " b/" makes the diff --git line ambiguous; the parser
/// split it at the first " b/" and then refused the ---/+++ names as inconsistent, so the renderer's
/// own output for such a rename did not parse.
#[test]
fn name_holding_space_b_slash() {
    let p = Path::new("x.patch");
    let diff = "diff --git a/x b/y b/z\n--- a/x b/y\n+++ b/z\n@@ -1 +1 @@\n-a\n+b\n";
    let ov = parse_overlay("x.patch", p, &overlay_with(diff)).unwrap();
    assert_eq!(ov.files[0].old_path.as_deref(), Some("x b/y"));
    assert_eq!(ov.files[0].new_path.as_deref(), Some("z"));
    // The first split would have made the old name "x/", which is not a normalized path.
    let diff = "diff --git a/x/ b/y b/z\n--- a/x/ b/y\n+++ b/z\n@@ -1 +1 @@\n-a\n+b\n";
    let ov = parse_overlay("x.patch", p, &overlay_with(diff)).unwrap();
    assert_eq!(ov.files[0].old_path.as_deref(), Some("x/ b/y"));
}

/// `patch_parse`: a renamed name holding a newline (legal in git, quoted on the diff --git line)
/// was written raw on the `rename to` line, so the rendering did not parse; git quotes it there too.
#[test]
fn rename_to_a_name_with_a_newline() {
    let p = Path::new("x.patch");
    let diff =
        "diff --git a/f \"b/g\\nh\"\nsimilarity index 100%\nrename from f\nrename to \"g\\nh\"\n";
    let ov = parse_overlay("x.patch", p, &overlay_with(diff)).unwrap();
    assert_eq!(ov.files[0].new_path.as_deref(), Some("g\nh"));
    let mut out = String::new();
    overlay::patch::render_diff(
        &mut out,
        &[overlay::patch::RenderFile {
            patch: &ov.files[0],
            old_id: "0".repeat(12),
            new_id: "0".repeat(12),
            similarity: Some(100),
            mode: 0o100644,
        }],
    );
    assert!(out.contains("rename to \"g\\nh\"\n"), "{out}");
    let again = parse_overlay("x.patch", p, &overlay_with(&out)).unwrap();
    assert_eq!(
        again.files,
        ov.files
            .iter()
            .map(|f| FilePatch {
                patch_line: again.files[0].patch_line,
                ..f.clone()
            })
            .collect::<Vec<_>>()
    );
}

/// `patch_parse`: the diffstat wrote names raw, so a new file named "x\ndiff --git ..." put a false
/// file header before the first real one and the rendering did not parse; git quotes them.
#[test]
fn diffstat_quotes_names() {
    let f = FilePatch {
        old_path: None,
        new_path: Some("x\ndiff --git a/y b/y".into()),
        old_mode: None,
        new_mode: Some(0o100644),
        hunks: Vec::new(),
        patch_line: 0,
    };
    let mut out = String::new();
    overlay::patch::render_diffstat(&mut out, &[&f]);
    assert!(out.contains("\"x\\ndiff --git a/y b/y\""), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("diff --git")), "{out}");
}

/// `symbols`: an `#if` never closed left every branch's symbols in the index; a definition of the
/// `#else` branch (scanned from the state at the `#if`, inside `struct A`) overlapped `A`, which the
/// first branch had closed.
#[test]
fn unterminated_if_does_not_make_overlapping_symbols() {
    let src = "struct A {\n  void f\n#if 1\n};\n#else\nvoid g() { }\n}\n";
    let index = overlay::symbols::scan(src);
    let syms = index.symbols();
    for (i, s) in syms.iter().enumerate() {
        for t in &syms[..i] {
            let disjoint = t.span.end <= s.span.start || s.span.end <= t.span.start;
            let nested = t.span.start <= s.span.start && s.span.end <= t.span.end;
            assert!(disjoint || nested, "overlap:\n{t:?}\n{s:?}");
        }
    }
    assert!(syms.iter().any(|s| s.name == "A"), "{syms:?}");
}

fn file_patch(hunks: Vec<overlay::patch::Hunk>) -> FilePatch {
    FilePatch {
        old_path: Some("f".into()),
        new_path: Some("f".into()),
        old_mode: None,
        new_mode: None,
        hunks,
        patch_line: 0,
    }
}

/// `apply`: a hunk with no context at all (here: filling an empty file, ending without a newline)
/// was placed above the lines of a non-empty file, dropping its "\ No newline at end of file" and
/// leaving a result whose reverse did not apply. git requires such a hunk to match at the end too.
#[test]
fn contextless_insertion_must_match_at_the_end() {
    let hunks = overlay::diff::hunks("", "a\nb", 3).unwrap();
    assert_eq!(hunks.len(), 1);
    let fp = file_patch(hunks);
    let (out, _) = apply_hunks(&Text::parse(""), &fp).unwrap();
    assert_eq!(out.render(), "a\nb");
    match apply_hunks(&Text::parse("z\n"), &fp) {
        Err((1, Failure::NoMatch { .. })) => {}
        other => panic!("placed above existing lines: {other:?}"),
    }
}

/// `merge3`: a side with a NUL byte (binary to libgit2) made the fuzz build (release, debug
/// assertions, nightly) abort inside git2 0.21's `MergeFileResult::content`, which builds a slice
/// from a null pointer. `merge3` now answers git's trivial cases itself and never hands libgit2
/// what it may call binary. Runs in a fresh process, since the failure was an abort.
#[test]
fn merge3_with_a_nul_byte() {
    common::run_ignored_in_fresh_process("merge3_with_a_nul_byte_in_this_process");
}

#[test]
#[ignore = "run by merge3_with_a_nul_byte in a fresh process"]
fn merge3_with_a_nul_byte_in_this_process() {
    let labels = overlay::merge::Labels {
        base: "base",
        ours: "ours",
        theirs: "theirs",
    };
    // Found as: theirs unchanged (empty), ours a text with a NUL line; the merge must take ours.
    let ours = b"\n\0\na\n\na";
    let r = overlay::merge::merge3(b"", ours, b"", "f", labels).unwrap();
    assert_eq!(r, Ok(ours.to_vec()));
}

/// The binary case that is not trivial: both sides changed a file libgit2 would call binary. A
/// conflict keeping ours, as git does, not an abort.
#[test]
fn merge3_of_binary_changed_on_both_sides_conflicts_keeping_ours() {
    let labels = overlay::merge::Labels {
        base: "base",
        ours: "ours",
        theirs: "theirs",
    };
    let r = overlay::merge::merge3(b"a\0\n", b"b\0\n", b"c\0\n", "f", labels).unwrap();
    assert_eq!(r, Err(b"b\0\n".to_vec()));
}

/// `symbols`: a scanned name ending in a vertical tab was not found by its own qualified name,
/// because `find` trimmed the name it was given (campaign of 2026-11-29, 5.8 M executions).
#[test]
fn a_symbol_is_found_by_its_own_name_whatever_bytes_it_ends_with() {
    let src = b"\ner::Loaderns::Loader::operato\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0r()0\nvoidr<flo 8>::oper)0\nvoidc _fndeae() { }dvns::Loader::operator()0\nvoid c_fnd'''''''''''''''''''')0\nvoidc _fndneweae\x01\0\0\0\0\0\0\x0b() { }=";
    let src = std::str::from_utf8(src).unwrap();
    let index = overlay::symbols::scan(src);
    assert!(!index.symbols().is_empty());
    for s in index.symbols() {
        assert!(index.fingerprint_of(&s.qualified).is_some(), "{s:?}");
    }
}
