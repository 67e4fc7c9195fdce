//! Overlay files: whatever parses renders to text that parses to the same overlay, and rendering is a
//! fixed point. Canonical text is what `bump::rewrite` writes: the prelude kept verbatim plus
//! `render_patch_body` of the parsed files.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use overlay::patch::{FilePatch, Overlay, parse_overlay};
use overlay::render::render_patch_body;
use overlay::tree::{BlobSource, Tree};

/// Rendering between empty trees never reads a blob (index lines become zeros).
struct NoBlobs;

impl BlobSource for NoBlobs {
    fn blob(&self, id: git2::Oid) -> overlay::Result<Vec<u8>> {
        panic!("render read blob {id}")
    }
}

fn render(ov: &Overlay) -> String {
    let sig = ov.signature.clone().unwrap_or_else(|| "overlay".into());
    let empty = Tree::default();
    ov.prelude.clone()
        + &render_patch_body(&ov.files, &empty, &empty, &sig, overlay::render::ABBREV, &NoBlobs)
            .expect("render is infallible")
}

/// The mode `Tree::apply` gives the file afterwards (`None`: keeps the old one; deleted files have
/// none). This is what a rendering must preserve.
fn modes(f: &FilePatch) -> Option<u32> {
    match (f.is_new(), f.is_delete()) {
        (true, _) => Some(f.new_mode.unwrap_or(0o100644)),
        (_, true) => None,
        _ => f.new_mode,
    }
}

fn assert_same(a: &Overlay, b: &Overlay, what: &str) {
    assert_eq!(a.author, b.author, "{what}: author");
    assert_eq!(a.date, b.date, "{what}: date");
    assert_eq!(a.subject, b.subject, "{what}: subject");
    assert_eq!(a.body, b.body, "{what}: body");
    assert_eq!(a.trailers, b.trailers, "{what}: trailers");
    assert_eq!(a.files.len(), b.files.len(), "{what}: file count");
    for (x, y) in a.files.iter().zip(&b.files) {
        assert_eq!(x.old_path, y.old_path, "{what}: old path");
        assert_eq!(x.new_path, y.new_path, "{what}: new path");
        assert_eq!(modes(x), modes(y), "{what}: modes of {}", x.path());
        assert_eq!(
            x.hunks.len(),
            y.hunks.len(),
            "{what}: hunks of {}",
            x.path()
        );
        for (h, k) in x.hunks.iter().zip(&y.hunks) {
            assert!(h.same_as(k), "{what}: {h:?}\n!=\n{k:?}");
            assert_eq!(h.heading, k.heading, "{what}: heading");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.patch");
    let Ok(ov) = parse_overlay("fuzz.patch", path, raw) else {
        return;
    };
    let r1 = render(&ov);
    let ov1 = parse_overlay("fuzz.patch", path, &r1)
        .unwrap_or_else(|e| panic!("the rendering does not parse: {e}\n{r1}"));
    assert_same(&ov, &ov1, "parse(render(x)) vs x");
    let r2 = render(&ov1);
    assert_eq!(r1, r2, "render(parse(render(x))) != render(x)");
    let ov2 = parse_overlay("fuzz.patch", path, &r2).expect("same text parsed before");
    assert_same(&ov1, &ov2, "second round");
    assert_eq!(ov1.signature, ov2.signature);
});
