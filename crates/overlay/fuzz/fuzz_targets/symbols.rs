//! The C++/Metal symbol scanner: spans lie within the text and on char boundaries, line numbers
//! match the spans, spans nest or are disjoint, `enclosing` returns the innermost symbol containing
//! a line, and scanning and fingerprints are deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use overlay::symbols::{fingerprint, scan};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let index = scan(src);
    let syms = index.symbols();
    // Bytes, not str: `span.end - 1` may fall inside a multi-byte character.
    let line_of = |byte: usize| {
        src.as_bytes()[..byte]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    };
    let line_count = src.matches('\n').count() + 1;
    for (i, s) in syms.iter().enumerate() {
        assert!(
            s.span.start < s.span.end && s.span.end <= src.len(),
            "{s:?}"
        );
        assert!(src.is_char_boundary(s.span.start) && src.is_char_boundary(s.span.end));
        assert!(!s.name.is_empty(), "{s:?}");
        assert_eq!(s.start_line, line_of(s.span.start), "{s:?}");
        assert_eq!(s.end_line, line_of(s.span.end - 1), "{s:?}");
        assert!(s.end_line <= line_count);
        if i > 0 {
            let p = &syms[i - 1];
            assert!(
                (p.span.start, std::cmp::Reverse(p.span.end))
                    <= (s.span.start, std::cmp::Reverse(s.span.end)),
                "order"
            );
        }
        for t in &syms[..i] {
            let disjoint = t.span.end <= s.span.start || s.span.end <= t.span.start;
            let nested = (t.span.start <= s.span.start && s.span.end <= t.span.end)
                || (s.span.start <= t.span.start && t.span.end <= s.span.end);
            assert!(disjoint || nested, "overlap:\n{t:?}\n{s:?}");
        }
    }
    for line in 1..=line_count {
        let containing: Vec<_> = syms.iter().filter(|s| s.contains_line(line)).collect();
        match index.enclosing(line) {
            None => assert!(containing.is_empty(), "line {line}: {containing:?}"),
            Some(e) => {
                assert!(e.contains_line(line));
                // Innermost: nothing containing the line starts later (or as early but shorter).
                for c in containing {
                    assert!(
                        (c.span.start, std::cmp::Reverse(c.span.end))
                            <= (e.span.start, std::cmp::Reverse(e.span.end)),
                        "line {line}: {c:?} is inside {e:?}"
                    );
                }
            }
        }
    }
    assert_eq!(scan(src), index, "scan is deterministic");
    assert_eq!(fingerprint(src), fingerprint(src));
    for s in syms {
        // Drift compares a definition's fingerprint across two versions of a file, so it should
        // depend on the definition's own text only. Not asserted where a preprocessor line is in
        // play: a span starting at a malformed directive with an unterminated literal lexes
        // differently alone (open finding, docs/reliability.md).
        if !src[s.span.clone()].contains('#') {
            assert_eq!(s.fingerprint, fingerprint(&src[s.span.clone()]), "{s:?}");
        }
        assert!(index.fingerprint_of(&s.qualified).is_some());
    }
});
