//! libgit2's 3-way merge as the bump uses it: with one side unchanged, or both sides equal, the
//! merge takes that side, without a conflict.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use overlay::merge::merge3;

/// A small line alphabet, so that repeated lines (the hard case for a diff) are common, plus free
/// text for anything else.
#[derive(Arbitrary, Debug)]
enum Line {
    Known(u8),
    Free(String),
}

#[derive(Arbitrary, Debug)]
struct Doc {
    lines: Vec<Line>,
    final_newline: bool,
}

#[derive(Arbitrary, Debug)]
struct Input {
    base: Doc,
    ours: Doc,
    theirs: Doc,
}

const ALPHABET: [&str; 8] = ["a", "b", "c", "{", "}", "", "x\r", "\tz"];

fn text(d: &Doc) -> Vec<u8> {
    let lines: Vec<String> = d
        .lines
        .iter()
        .map(|l| match l {
            Line::Known(i) => ALPHABET[*i as usize % ALPHABET.len()].to_string(),
            // One line each: a '\n' inside would only make another line. NULs and other control
            // bytes stay: `merge3` must answer (a conflict keeping ours) where libgit2 sees binary.
            Line::Free(s) => s.replace('\n', ""),
        })
        .collect();
    let mut s = lines.join("\n");
    if d.final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s.into_bytes()
}

fuzz_target!(|input: Input| {
    let (base, ours, theirs) = (text(&input.base), text(&input.ours), text(&input.theirs));
    let labels = overlay::merge::Labels {
        base: "base",
        ours: "ours",
        theirs: "theirs",
    };
    let m = |a: &[u8], o: &[u8], t: &[u8]| merge3(a, o, t, "f", labels).expect("merge3 runs");
    assert_eq!(m(&base, &ours, &base), Ok(ours.clone()), "theirs unchanged");
    assert_eq!(
        m(&base, &base, &theirs),
        Ok(theirs.clone()),
        "ours unchanged"
    );
    assert_eq!(m(&base, &ours, &ours), Ok(ours.clone()), "both sides equal");
    // Whatever the sides, a merge never fails to run and never loses the guard.
    let _ = m(&base, &ours, &theirs);
});
