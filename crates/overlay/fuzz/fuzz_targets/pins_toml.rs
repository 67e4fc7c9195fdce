//! pins.toml: a parsed manifest only holds valid pins (full lowercase 40-hex revs, no `ext::` URL,
//! relative overlay folders that stay inside the root), errors name a line of the text, a load that
//! reads no key beyond the engine's (`Extras::Unread`) takes every text a checked one takes, with
//! the same pins, and `bump::set_pin` changes the rev and nothing else.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use overlay::manifest::{Extras, Pins};

const NEW_REV: &str = "0123456789abcdef0123456789abcdef01234567";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("pins.toml");
    // Lines as an editor counts them: a final empty line after the last '\n' exists.
    let line_count = text.matches('\n').count() + 1;
    let pins = match Pins::parse(path, text, &Extras::Checked(&[])) {
        Ok(p) => p,
        Err(e) => {
            if let overlay::Error::Input { at, .. } = &e
                && let Some(line) = at.line
            {
                assert!(
                    line >= 1 && line <= line_count,
                    "error line {line} of {line_count}: {e}"
                );
            }
            return;
        }
    };
    assert!(!pins.upstreams.is_empty());
    let unread = Pins::parse(path, text, &Extras::Unread)
        .unwrap_or_else(|e| panic!("Unread refuses what Checked takes: {e}"));
    assert_eq!(unread.upstreams, pins.upstreams);
    let mut prev_line = 0;
    for u in &pins.upstreams {
        assert!(!u.name.is_empty());
        assert!(
            u.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_eq!(u.rev.len(), 40, "{:?}", u.rev);
        assert!(
            u.rev.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
            "{:?}",
            u.rev
        );
        assert!(!u.url.is_empty() && u.url == u.url.trim(), "{:?}", u.url);
        assert!(!u.url.starts_with("ext::"), "{:?}", u.url);
        assert!(!u.overlays.as_os_str().is_empty());
        assert!(!u.overlays.is_absolute(), "{:?}", u.overlays);
        assert!(
            u.overlays.components().all(|c| !matches!(
                c,
                Component::ParentDir | Component::Prefix(_) | Component::RootDir
            )),
            "{:?}",
            u.overlays
        );
        if let Some(b) = &u.branch {
            assert!(!b.trim().is_empty());
        }
        assert!(u.line >= 1 && u.line <= line_count);
        assert!(u.line >= prev_line, "file order");
        prev_line = u.line;
    }
    for u in &pins.upstreams {
        // toml_edit may refuse what toml accepts (or name it differently); only a success is checked.
        let Ok(edited) = overlay::bump::set_pin(text, path, &u.name, NEW_REV) else {
            continue;
        };
        let again = Pins::parse(path, &edited, &Extras::Checked(&[]))
            .unwrap_or_else(|e| panic!("set_pin output does not parse: {e}\n{edited}"));
        assert_eq!(again.upstreams.len(), pins.upstreams.len());
        for (a, b) in pins.upstreams.iter().zip(&again.upstreams) {
            let mut want = a.clone();
            if a.name == u.name {
                want.rev = NEW_REV.to_string();
            }
            assert_eq!(&want, b, "set_pin changed more than {}.rev", u.name);
        }
    }
});
