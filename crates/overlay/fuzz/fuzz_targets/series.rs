//! The series file: every name returned is a valid file name of the overlay folder, its line number
//! points at a line holding it, names are unique, and writing them one per line parses back to the
//! same names.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use overlay::series::parse_series_names;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("series");
    let names = match parse_series_names(path, text) {
        Ok(n) => n,
        Err(e) => {
            if let overlay::Error::Input { at, .. } = &e {
                let line = at.line.expect("series errors name a line");
                assert!(
                    line >= 1 && line <= text.lines().count(),
                    "error line {line}: {e}"
                );
            }
            return;
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut prev = 0;
    for (i, (name, n)) in names.iter().enumerate() {
        assert!(!name.is_empty());
        assert!(!name.contains(char::is_whitespace), "{name:?}");
        assert!(!name.contains(['/', '\\', '#']), "{name:?}");
        assert!(name != "." && name != "..");
        assert!(*n > prev, "line numbers increase");
        prev = *n;
        let line = lines.get(n - 1).expect("line number within the text");
        assert!(
            line.contains(name.as_str()),
            "line {n} {line:?} lacks {name:?}"
        );
        assert!(
            names[..i].iter().all(|(m, _)| m != name),
            "{name:?} returned twice"
        );
    }
    let written: String = names.iter().map(|(n, _)| format!("{n}\n")).collect();
    let again = parse_series_names(path, &written).expect("written names parse");
    let a: Vec<&String> = names.iter().map(|(n, _)| n).collect();
    let b: Vec<&String> = again.iter().map(|(n, _)| n).collect();
    assert_eq!(a, b);
    for (i, (_, n)) in again.iter().enumerate() {
        assert_eq!(*n, i + 1);
    }
});
