//! Generators and helpers shared by the property-test binaries (`properties.rs`, `laws.rs`).

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use overlay::tree::BlobSource;
use proptest::prelude::*;

/// Every tree in the property tests holds inline bytes, so no blob is ever read.
pub struct NoBlobs;

impl BlobSource for NoBlobs {
    fn blob(&self, id: git2::Oid) -> overlay::Result<Vec<u8>> {
        panic!("unexpected blob read {id}")
    }
}

/// A small alphabet so repeated lines (and ambiguous placements) are common.
pub fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c", "{", "}", ""]).prop_map(str::to_string),
        1 => prop::sample::select(vec!["a\r", "x y", "\tz"]).prop_map(str::to_string),
    ]
}

pub fn lines(max: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(line(), 0..max)
}

pub fn join(lines: &[String], final_newline: bool) -> String {
    let mut s = lines.join("\n");
    if final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s
}

/// A text: random lines, usually with a final newline.
pub fn text(max: usize) -> impl Strategy<Value = String> {
    (lines(max), prop::bool::weighted(0.8)).prop_map(|(l, nl)| join(&l, nl))
}

/// Replaces `len` lines at `at` (both taken modulo the size) by `with`.
pub fn edit(lines: &[String], at: usize, len: usize, with: &[String]) -> Vec<String> {
    let at = at % (lines.len() + 1);
    let len = len.min(lines.len() - at);
    let mut out = lines[..at].to_vec();
    out.extend_from_slice(with);
    out.extend_from_slice(&lines[at + len..]);
    out
}

/// Runs the ignored test `name` of this test binary in a new process and asserts it passed: for
/// failures only a fresh process shows (libgit2 not yet initialised) or that abort the process.
#[track_caller]
pub fn run_ignored_in_fresh_process(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", name, "--test-threads=1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
