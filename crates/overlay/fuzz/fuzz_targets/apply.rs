//! Hunk placement and its reverse. A text and an edit script give (old, new); the engine's canonical
//! diff of them is applied to `old` and to `old` moved by lines inserted or removed far away.
//! Invariants: at its own text the diff applies at the recorded lines and gives `new`; wherever it
//! applies, every placement reports where the pre-image really is and nothing outside the reported
//! regions changes; the reversed hunks, placed where the hunks landed, restore the input exactly.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use overlay::apply::{Placement, Text, apply_hunks, reverse};
use overlay::patch::{FilePatch, Hunk};

const ALPHABET: [&str; 8] = ["a", "b", "c", "{", "}", "", "x\r", "\tz"];

#[derive(Arbitrary, Debug)]
struct Edit {
    at: u16,
    len: u8,
    with: Vec<u8>,
}

/// How the text the patch meets differs from the one it was made on, away from the hunks.
#[derive(Arbitrary, Debug)]
enum Move {
    Insert(Vec<u8>),
    RemoveTop(u8),
    Append(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    old: Vec<u8>,
    old_newline: bool,
    new_newline: bool,
    edits: Vec<Edit>,
    moves: Move,
}

fn lines(ix: &[u8]) -> Vec<String> {
    ix.iter()
        .map(|&i| ALPHABET[i as usize % ALPHABET.len()].to_string())
        .collect()
}

/// Canonical, as the engine reads files: `[""]` without a final newline is the empty file.
fn text(lines: Vec<String>, final_newline: bool) -> Text {
    Text::parse(
        &Text {
            lines,
            final_newline,
        }
        .render(),
    )
}

fn file_patch(hunks: Vec<Hunk>) -> FilePatch {
    FilePatch {
        old_path: Some("f".into()),
        new_path: Some("f".into()),
        old_mode: None,
        new_mode: None,
        hunks,
        patch_line: 0,
    }
}

/// Checks the placements against `input` and `out`, and that the reverse placed at the same spots
/// restores `input`.
fn check(input: &Text, out: &Text, hunks: &[Hunk], placements: &[Placement]) {
    assert_eq!(placements.len(), hunks.len());
    let mut want: Vec<String> = Vec::new();
    let mut cursor = 0;
    let mut moved = Vec::new();
    for (i, (h, p)) in hunks.iter().zip(placements).enumerate() {
        assert_eq!(p.hunk, i + 1);
        let pre: Vec<&str> = h.preimage().collect();
        let pos = p.actual - usize::from(h.old_len > 0);
        assert!(
            pos >= cursor,
            "hunk {} placed over the previous one: {p:?}",
            i + 1
        );
        assert!(
            pos + pre.len() <= input.lines.len(),
            "hunk {} past the end: {p:?}",
            i + 1
        );
        assert_eq!(
            &input.lines[pos..pos + pre.len()],
            &pre[..],
            "pre-image not at {p:?}"
        );
        want.extend_from_slice(&input.lines[cursor..pos]);
        want.extend(h.postimage().map(str::to_string));
        cursor = pos + pre.len();
        // The reverse, recorded where this hunk landed.
        let mut r = reverse(h);
        r.old_start = r
            .old_start
            .checked_add_signed(p.offset())
            .expect("placement in range");
        r.new_start = r
            .new_start
            .checked_add_signed(p.offset())
            .expect("placement in range");
        moved.push(r);
    }
    want.extend_from_slice(&input.lines[cursor..]);
    assert_eq!(
        out.lines, want,
        "lines outside the reported regions changed"
    );
    let (back, bp) = apply_hunks(out, &file_patch(moved))
        .unwrap_or_else(|(i, f)| panic!("reverse hunk {i} refused where its hunk landed: {f}"));
    for p in &bp {
        assert_eq!(
            p.offset(),
            0,
            "reverse placed away from where the hunk landed: {p:?}"
        );
    }
    assert_eq!(&back, input, "reverse did not restore the input");
}

fuzz_target!(|inp: Input| {
    let old = text(lines(&inp.old), inp.old_newline);
    let mut edited = old.lines.clone();
    for e in inp.edits.iter().take(4) {
        let at = e.at as usize % (edited.len() + 1);
        let len = (e.len as usize % 4).min(edited.len() - at);
        edited.splice(at..at + len, lines(&e.with[..e.with.len().min(4)]));
    }
    let new = text(edited, inp.new_newline);
    let (old_lines, new_lines) = (old.lines.clone(), new.lines.clone());
    let hunks = overlay::diff::text_hunks(&old, &new, overlay::diff::CONTEXT).expect("diff runs");
    if hunks.is_empty() {
        assert_eq!(old.render(), new.render());
        return;
    }
    let fp = file_patch(hunks.clone());

    // At its own text: exact, at the recorded lines.
    let (out, placements) = apply_hunks(&old, &fp)
        .unwrap_or_else(|(i, f)| panic!("hunk {i} refused at its own text: {f}"));
    assert_eq!(out.render(), new.render());
    assert!(placements.iter().all(|p| p.offset() == 0), "{placements:?}");
    check(&old, &out, &hunks, &placements);

    // Moved far away from every hunk.
    let first = hunks[0].old_start.saturating_sub(1).min(old_lines.len());
    let last = hunks
        .iter()
        .map(|h| h.old_start.saturating_sub(1) + h.old_len)
        .max()
        .unwrap_or(0);
    let (moved, shift) = match &inp.moves {
        Move::Insert(ix) => {
            let mut l = lines(&ix[..ix.len().min(16)]);
            let n = l.len() as isize;
            l.extend(old_lines.iter().cloned());
            (text(l, old.final_newline), n)
        }
        Move::RemoveTop(k) => {
            // Only lines above the first hunk's context.
            let k = (*k as usize).min(first);
            (
                text(old_lines[k..].to_vec(), old.final_newline),
                -(k as isize),
            )
        }
        Move::Append(ix) => {
            let mut l = old_lines.clone();
            l.extend(lines(&ix[..ix.len().min(16)]));
            (text(l, old.final_newline), 0)
        }
    };
    match apply_hunks(&moved, &fp) {
        Err(_) => {
            // Appending below a hunk that does not reach the end leaves every hunk at its recorded
            // line, where it must still apply.
            if matches!(inp.moves, Move::Append(_)) && last < old_lines.len() {
                panic!("refused after lines were appended below every hunk");
            }
        }
        Ok((out, placements)) => {
            check(&moved, &out, &hunks, &placements);
            if placements.iter().all(|p| p.offset() == shift) {
                let want: Vec<String> = match &inp.moves {
                    Move::Insert(_) => {
                        let n = shift as usize;
                        moved.lines[..n]
                            .iter()
                            .cloned()
                            .chain(new_lines.iter().cloned())
                            .collect()
                    }
                    Move::RemoveTop(_) => new_lines[(-shift) as usize..].to_vec(),
                    Move::Append(_) => {
                        let extra = moved.lines.len() - old_lines.len();
                        new_lines
                            .iter()
                            .cloned()
                            .chain(moved.lines[old_lines.len()..].iter().cloned())
                            .take(new_lines.len() + extra)
                            .collect()
                    }
                };
                assert_eq!(
                    out.lines, want,
                    "moved by {shift}, the result is not the moved edit"
                );
            }
        }
    }
});
