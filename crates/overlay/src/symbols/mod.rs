//! Symbol index for C, C++, Objective-C++ and Metal sources.
//!
//! Semantic-drift detection needs to know which definition encloses a patch
//! hunk, and what that definition looked like at the pin versus upstream. This
//! module finds definitions (things with a `{ ... }` body) with a hand-written,
//! comment/string/preprocessor-aware brace scanner. It does not parse C++: it
//! classifies each `{` that opens in a declaration scope (file, namespace,
//! `extern "C"`, class body) by looking at the tokens since the previous
//! declaration boundary. See `docs/symbols.md` for why a scanner was chosen
//! over tree-sitter, with measurements on a real Metal/C++ code base.
//!
//! Policies that callers rely on:
//! - Spans cover the whole definition: a leading `template <...>` header,
//!   attributes (`[[kernel]]`) and specifiers on the signature lines, up to the
//!   closing `}` (plus a directly following `;` for classes/structs/enums).
//! - Preprocessor conditionals: every branch is scanned, but after `#endif`
//!   the scanner continues from the state at the end of the *first* live
//!   branch (`#if 0` branches are skipped). A definition entirely inside an
//!   `#else` branch is still found; a brace opened differently in two branches
//!   is resolved the way the first branch does it.
//! - Lambdas, local classes inside function bodies, and Objective-C methods are
//!   not symbols. Macro definitions (`#define NAME`) are, with kind
//!   [`SymbolKind::Macro`], because GPU kernel libraries instantiate through macros.
//! - Malformed input never panics: unbalanced `}` are ignored, definitions
//!   still open at end of input are dropped, unterminated comments and
//!   literals run to end of line (literals) or end of input (comments).

use std::fmt;
use std::ops::Range;

mod lex;
mod parse;

use lex::*;
use parse::*;

/// What kind of definition a [`Symbol`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SymbolKind {
    /// Free function, function template, member function, constructor,
    /// destructor or operator, defined with a body.
    Function,
    /// `class` definition with a body.
    Class,
    /// `struct` definition with a body.
    Struct,
    /// `union` definition with a body.
    Union,
    /// `enum` / `enum class` definition with a body.
    Enum,
    /// `#define NAME ...`, spanning all continuation lines.
    Macro,
}

impl fmt::Display for SymbolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SymbolKind::Function => "function",
            SymbolKind::Class => "class",
            SymbolKind::Struct => "struct",
            SymbolKind::Union => "union",
            SymbolKind::Enum => "enum",
            SymbolKind::Macro => "macro",
        })
    }
}

/// One definition found by [`scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Unqualified name: `qmv_impl`, `load_unsafe`, `operator()`, `~Foo`.
    pub name: String,
    /// Name qualified by enclosing named namespaces and classes and by the
    /// qualifiers written in an out-of-class definition, template arguments
    /// removed: `mlx::core::qdot`, `QuantizedBlockLoader::load_unsafe`.
    /// Anonymous namespaces add nothing, so code can be named as it is
    /// written. Macros are never qualified.
    pub qualified: String,
    /// Kind of definition.
    pub kind: SymbolKind,
    /// Byte range in the scanned source (end exclusive).
    pub span: Range<usize>,
    /// 1-based line of the first byte of `span`.
    pub start_line: usize,
    /// 1-based line of the last byte of `span` (inclusive).
    pub end_line: usize,
    /// The span's text with comments removed and whitespace normalized (see
    /// [`fingerprint`]). Equal fingerprints mean no semantic change.
    pub fingerprint: String,
}

impl Symbol {
    /// Whether the 1-based `line` falls within this definition.
    pub fn contains_line(&self, line: usize) -> bool {
        self.start_line <= line && line <= self.end_line
    }
}

/// All definitions of one source file, in order of their start offset
/// (an enclosing class comes before its members).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolIndex {
    symbols: Vec<Symbol>,
}

impl SymbolIndex {
    /// Every symbol, ordered by start offset (ties: the longer span first).
    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    /// The innermost definition containing the 1-based `line`, e.g. the first
    /// changed line of a hunk. Template headers and signature lines belong to
    /// their definition. Innermost means the latest start; of definitions
    /// starting together, the shortest.
    pub fn enclosing(&self, line: usize) -> Option<&Symbol> {
        self.symbols
            .iter()
            .filter(|s| s.contains_line(line))
            .max_by(|a, b| {
                a.span
                    .start
                    .cmp(&b.span.start)
                    .then(b.span.end.cmp(&a.span.end))
            })
    }

    /// Every definition whose line span intersects `first..=last` (1-based),
    /// in source order, outer before inner. Use this for a hunk whose first
    /// changed line is outside any definition, e.g. a blank or comment line
    /// above an added function.
    pub fn overlapping(&self, first: usize, last: usize) -> Vec<&Symbol> {
        self.symbols
            .iter()
            .filter(|s| s.start_line <= last && first <= s.end_line)
            .collect()
    }

    /// Every symbol whose unqualified name or qualified name equals `name`, or
    /// whose qualified name ends with `::` + `name`: `qdot`, `core::qdot` and
    /// `mlx::core::qdot` all find `mlx::core::qdot`. A leading `::` is
    /// ignored. Overloads and specializations all match, in source order.
    pub fn find(&self, name: &str) -> Vec<&Symbol> {
        // Trimmed for names typed in trailers; as given too, since a scanned name may end in a byte
        // `trim` removes, such as a vertical tab (found by fuzzing).
        let names = [
            name.trim().trim_start_matches("::"),
            name.trim_start_matches("::"),
        ];
        let matches = |s: &Symbol, name: &str| {
            !name.is_empty()
                && (s.name == name
                    || s.qualified == name
                    || (s.qualified.len() > name.len() + 2
                        && s.qualified.ends_with(name)
                        && s.qualified[..s.qualified.len() - name.len()].ends_with("::")))
        };
        self.symbols
            .iter()
            .filter(|s| names.iter().any(|n| matches(s, n)))
            .collect()
    }

    /// Combined fingerprint of everything [`find`](Self::find) returns for
    /// `name`: the fingerprints in source order joined by newlines, or `None`
    /// when nothing matches. Drift on a name with overloads is judged on the
    /// whole set, so adding, removing, reordering or changing any overload
    /// counts as a change.
    pub fn fingerprint_of(&self, name: &str) -> Option<String> {
        let found = self.find(name);
        if found.is_empty() {
            return None;
        }
        Some(
            found
                .iter()
                .map(|s| s.fingerprint.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
}

/// Scans `src` for definitions. Never panics; see the module docs for how
/// malformed input degrades.
pub fn scan(src: &str) -> SymbolIndex {
    let lexed = lex(src);
    let mut parser = Parser {
        toks: &lexed.toks,
        state: State {
            frames: vec![Frame::new(FrameKind::Root)],
        },
        conds: Vec::new(),
        out: Vec::new(),
    };
    parser.run(src, &lexed.items);
    // An `#if` still open at end of input ends there, so that (as after a real `#endif`) only the
    // first live branch's view survives: otherwise a definition from another branch, scanned from
    // the state at the `#if`, could overlap one the first branch closed (found by fuzzing).
    while !parser.conds.is_empty() {
        parser.cond(CondKind::Endif, src.len());
    }
    let mut raws = parser.out;
    raws.sort_by(|a, b| {
        a.span
            .start
            .cmp(&b.span.start)
            .then(b.span.end.cmp(&a.span.end))
    });
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(src.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |byte: usize| line_starts.partition_point(|&s| s <= byte);
    let symbols = raws
        .into_iter()
        .map(|r| Symbol {
            start_line: line_of(r.span.start),
            end_line: line_of(r.span.end.saturating_sub(1).max(r.span.start)),
            fingerprint: fingerprint_with(src, r.span.clone(), &lexed.comments, &lexed.literals),
            name: r.name,
            qualified: r.qualified,
            kind: r.kind,
            span: r.span,
        })
        .collect();
    SymbolIndex { symbols }
}

/// Normalizes a piece of C-family source the way [`Symbol::fingerprint`] is
/// built: comments are dropped (a comment-only upstream edit is not semantic
/// drift), string and character literals are kept verbatim, and whitespace
/// is removed except where it separates two word characters or two
/// punctuation characters that would otherwise fuse into another token
/// (`a - -b` vs `a--b`); such whitespace becomes one space. This makes the
/// fingerprint stable under re-indentation and clang-format re-wrapping
/// (`f(\n  a)` vs `f(a)`), which a plain "collapse to one space" is not.
pub fn fingerprint(src: &str) -> String {
    let lexed = lex(src);
    fingerprint_with(src, 0..src.len(), &lexed.comments, &lexed.literals)
}

fn fingerprint_with(
    src: &str,
    span: Range<usize>,
    comments: &[Range<usize>],
    literals: &[Range<usize>],
) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(span.len());
    let mut pending_space = false;
    let mut ci = comments.partition_point(|c| c.end <= span.start);
    let mut li = literals.partition_point(|l| l.end <= span.start);
    let mut i = span.start;
    let mut chunk_start = i;
    // Emits src[chunk_start..upto] (no whitespace, no comments inside).
    let flush = |out: &mut String, pending: &mut bool, text: &str| {
        if text.is_empty() {
            return;
        }
        if *pending && needs_space(out.as_bytes().last().copied(), text.as_bytes()) {
            out.push(' ');
        }
        *pending = false;
        out.push_str(text);
    };
    while i < span.end {
        if ci < comments.len() && comments[ci].start <= i {
            flush(&mut out, &mut pending_space, &src[chunk_start..i]);
            pending_space = true;
            i = comments[ci].end.max(i + 1).min(span.end);
            ci += 1;
            chunk_start = i;
            continue;
        }
        if li < literals.len() && literals[li].start <= i {
            let end = literals[li].end.min(span.end).max(i + 1);
            // A literal is glued to what precedes it in the chunk.
            i = end;
            li += 1;
            continue;
        }
        if b[i].is_ascii_whitespace() {
            flush(&mut out, &mut pending_space, &src[chunk_start..i]);
            pending_space = true;
            while i < span.end && b[i].is_ascii_whitespace() {
                i += 1;
            }
            chunk_start = i;
            continue;
        }
        i += 1;
        // Keep i on a char boundary for slicing.
        while i < span.end && !src.is_char_boundary(i) {
            i += 1;
        }
    }
    flush(
        &mut out,
        &mut pending_space,
        &src[chunk_start..span.end.max(chunk_start)],
    );
    out
}

fn needs_space(prev: Option<u8>, next: &[u8]) -> bool {
    let (Some(p), Some(&n)) = (prev, next.first()) else {
        return false;
    };
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80;
    if word(p) {
        // `L "x"` differs from `L"x"`.
        return word(n) || n == b'"' || n == b'\'';
    }
    const FUSING: &[&[u8; 2]] = &[
        b"++", b"--", b"->", b"<<", b">>", b"<=", b">=", b"==", b"!=", b"&&", b"||", b"+=", b"-=",
        b"*=", b"/=", b"%=", b"^=", b"&=", b"|=", b"::", b".*", b"##", b"/*", b"//", b"..",
    ];
    FUSING.iter().any(|f| f[0] == p && f[1] == n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn listing(src: &str) -> String {
        scan(src)
            .symbols()
            .iter()
            .map(|s| {
                format!(
                    "{}-{} {} {}\n",
                    s.start_line, s.end_line, s.kind, s.qualified
                )
            })
            .collect()
    }

    fn names(src: &str) -> Vec<String> {
        scan(src)
            .symbols()
            .iter()
            .filter(|s| s.kind != SymbolKind::Macro)
            .map(|s| s.qualified.clone())
            .collect()
    }

    fn only<'a>(idx: &'a SymbolIndex, name: &str) -> &'a Symbol {
        let found = idx.find(name);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        found[0]
    }

    const METAL: &str = r#"#include <metal_stdlib>
using namespace metal;

#define KERNEL_CONST static constant constexpr const
KERNEL_CONST int WIDTH = 32;

namespace demo {
namespace inner {

template <typename T, int N = (4 > 2)>
struct Tile {
  T v[N];

  Tile(const device T* src, uint lane [[thread_index_in_simdgroup]]) thread
      : v{}, lane_(lane) {}

  METAL_FUNC T sum() const thread {
    T s = 0;
#pragma clang loop unroll(full)
    for (int i = 0; i < N; i++) {
      s += v[i];
    }
    return s;
  }

  T operator()(int i) const { return v[i]; }

 private:
  uint lane_;
};

} // namespace inner

enum class Mode : int { Fast, Safe };

template <typename T>
[[kernel]] void reduce(
    const device T* in [[buffer(0)]],
    device T* out [[buffer(1)]],
    uint tid [[thread_position_in_grid]]) {
  inner::Tile<T> t(in, tid);
  out[tid] = t.sum();
}

} // namespace demo

#define instantiate_reduce(name, type) \
  template [[host_name(name)]] [[kernel]] void demo::reduce<type>( \
      const device type*, device type*, uint);

instantiate_reduce("reduce_f32", float)
instantiate_reduce("reduce_f16", half)
"#;

    #[test]
    fn snapshot_of_metal_listing() {
        expect![[r#"
            4-4 macro KERNEL_CONST
            10-30 struct demo::inner::Tile
            14-15 function demo::inner::Tile::Tile
            17-24 function demo::inner::Tile::sum
            26-26 function demo::inner::Tile::operator()
            34-34 enum demo::Mode
            36-43 function demo::reduce
            47-49 macro instantiate_reduce
        "#]]
        .assert_eq(&listing(METAL));
    }

    #[test]
    fn template_header_and_attributes_are_in_the_span() {
        let idx = scan(METAL);
        let tile = only(&idx, "inner::Tile");
        assert!(METAL[tile.span.clone()].starts_with("template <typename T, int N = (4 > 2)>"));
        assert!(METAL[tile.span.clone()].ends_with("};"));
        let reduce = only(&idx, "reduce");
        assert!(METAL[reduce.span.clone()].starts_with("template <typename T>\n[[kernel]] void"));
        assert!(METAL[reduce.span.clone()].ends_with('}'));
        let mode = only(&idx, "Mode");
        assert_eq!(
            &METAL[mode.span.clone()],
            "enum class Mode : int { Fast, Safe };"
        );
    }

    #[test]
    fn enclosing_covers_template_signature_and_body_lines() {
        let idx = scan(METAL);
        let q = |line| idx.enclosing(line).map(|s| s.qualified.as_str());
        assert_eq!(q(36), Some("demo::reduce")); // template header
        assert_eq!(q(37), Some("demo::reduce")); // [[kernel]] signature
        assert_eq!(q(39), Some("demo::reduce")); // parameter line
        assert_eq!(q(42), Some("demo::reduce")); // body
        assert_eq!(q(20), Some("demo::inner::Tile::sum")); // #pragma in body
        assert_eq!(q(28), Some("demo::inner::Tile")); // member outside methods
        assert_eq!(q(10), Some("demo::inner::Tile"));
        assert_eq!(q(48), Some("instantiate_reduce"));
        assert_eq!(q(7), None); // namespaces are not symbols
        assert_eq!(q(51), None);
        let over: Vec<_> = idx
            .overlapping(31, 36)
            .iter()
            .map(|s| s.qualified.as_str())
            .collect();
        assert_eq!(over, ["demo::Mode", "demo::reduce"]);
        assert!(idx.overlapping(5, 9).is_empty());
    }

    #[test]
    fn qualified_names_through_namespaces_and_out_of_class_definitions() {
        let src = r#"
namespace a { namespace b {
int f() { return 1; }
} }
namespace a::c {
namespace {
int hidden() { return 2; }
}
template <typename T>
struct Box<T*> final : public Base<T> {
  struct Inner { void g() {} };
};
template <typename T>
T Box<T>::get() const & noexcept { return *p_; }
Box::~Box() { delete p_; }
Outer::Nested::Nested(int x) : x_(x), y_{x + 1}, z_(Z{x}) { init(); }
bool operator==(const Box& l, const Box& r) { return l.p_ == r.p_; }
Box::operator bool() const { return p_ != nullptr; }
template <>
void put<int>(int v) { sink(v); }
}
"#;
        assert_eq!(
            names(src),
            [
                "a::b::f",
                "a::c::hidden",
                "a::c::Box",
                "a::c::Box::Inner",
                "a::c::Box::Inner::g",
                "a::c::Box::get",
                "a::c::Box::~Box",
                "a::c::Outer::Nested::Nested",
                "a::c::operator==",
                "a::c::Box::operator bool",
                "a::c::put",
            ]
        );
        let idx = scan(src);
        assert_eq!(only(&idx, "~Box").name, "~Box");
        // The braced member initializers do not end the constructor early.
        assert!(src[only(&idx, "Nested::Nested").span.clone()].ends_with("{ init(); }"));
    }

    #[test]
    fn find_matches_unqualified_and_qualified_suffixes() {
        let src = r#"
namespace mlx::core {
float qdot(const float* x) { return x[0]; }
float qdot(const float* x, int n) { return x[n]; }
namespace other { void qdot_safe() {} }
}
"#;
        let idx = scan(src);
        assert_eq!(idx.find("qdot").len(), 2);
        assert_eq!(idx.find("core::qdot").len(), 2);
        assert_eq!(idx.find("::mlx::core::qdot").len(), 2);
        assert_eq!(idx.find("ore::qdot").len(), 0);
        assert_eq!(idx.find("other::qdot_safe").len(), 1);
        assert_eq!(idx.find("").len(), 0);
        let found = idx.find("qdot");
        assert_eq!(
            idx.fingerprint_of("qdot"),
            Some(format!(
                "{}\n{}",
                found[0].fingerprint, found[1].fingerprint
            ))
        );
        assert_eq!(idx.fingerprint_of("missing"), None);
    }

    #[test]
    fn declarations_lambdas_and_initializers_are_not_symbols() {
        let src = r#"
int proto(int x);
struct Fwd;
class Decl { Decl() = default; void m(); ~Decl() = delete; };
auto lambda = [](int x) { return x + 1; };
static const int table[] = {1, 2, 3};
std::vector<int> braced{1, 2};
void user() {
  auto inner = [&](int y) { return y; };
  struct Local { void no() {} };
}
extern template void proto<int>(int);
"#;
        assert_eq!(names(src), ["Decl", "user"]);
    }

    #[test]
    fn literals_and_comments_with_braces_do_not_confuse_nesting() {
        let src = r##"
const char* raw = R"(} { ")";
const char* delim = R"x(no end )" here })x";
char open = '{', close = '}', quote = '\'';
// a comment with } and {
/* a block comment
   with } */
constexpr long big = 1'000'000; int after_sep() { return 1'0; }
const char* s = "}\"{";
void target() { if (open == '}') { /* } */ } }
"##;
        assert_eq!(names(src), ["after_sep", "target"]);
        let idx = scan(src);
        assert_eq!(only(&idx, "target").start_line, 10);
    }

    #[test]
    fn multi_line_define_with_braces_is_a_macro_not_a_scope() {
        let src = "#define MAKE(name) \\\n  void name() {    \\\n    work();        \\\n\n\nvoid real() { }\n";
        assert_eq!(
            listing(src),
            "1-3 macro MAKE\n6-6 function real\n",
            "the blank line ends the directive"
        );
        let src = "#define OPEN {\nvoid g() { }\n";
        assert_eq!(names(src), ["g"]);
    }

    #[test]
    fn conditional_branches_that_both_open_a_brace_follow_the_first() {
        let src = r#"
#if defined(FAST)
void kernel(int a, float b) {
#else
void kernel(int a) {
#endif
  body(a);
}
#ifdef __APPLE__
void only_apple() {}
#else
void only_other() {}
#endif
#if 0
void dead() {}
#else
void alive() {}
#endif
void after() {}
"#;
        let idx = scan(src);
        assert_eq!(
            names(src),
            ["kernel", "only_apple", "only_other", "alive", "after"]
        );
        let k = only(&idx, "kernel");
        assert_eq!((k.start_line, k.end_line), (3, 8));
        // A body closed in both branches is reported once.
        let src = "void f() {\n#if A\n}\n#else\n}\n#endif\nvoid g() {}\n";
        assert_eq!(names(src), ["f", "g"]);
    }

    #[test]
    fn macro_invocations_without_semicolons_stay_out_of_spans() {
        let src = r#"
instantiate_kernel("k_f32", kern, float)
instantiate_kernel("k_f16", kern, half)
template <typename T>
void next_fn(T x) { use(x); }
REGISTER_OP(Add)
const char* name() const override { return "Add"; }
"#;
        let idx = scan(src);
        assert_eq!(names(src), ["next_fn", "name"]);
        assert_eq!(only(&idx, "next_fn").start_line, 4);
        assert_eq!(only(&idx, "name").start_line, 7);
    }

    #[test]
    fn linkage_blocks_classes_enums_and_requires_clauses() {
        let src = r#"
extern "C" {
void c_entry(void) { }
}
class EXPORT_API Engine : public Base, private Mixin {
 public:
  void run() override { step(); }
 protected:
  int n_ = 0;
};
struct Plain { int x; };
union Bits { int i; float f; };
enum Color { Red, Green };
struct Vec *make_vec(int n) { return alloc(n); }
template <typename T>
  requires std::integral<T>
T twice(T x) { return 2 * x; }
template <typename T>
requires(sizeof(T) > 4) struct Wide { T v; };
template <typename T>
T half_of(T x) requires Small<T> { return x / 2; }
"#;
        assert_eq!(
            listing(src),
            "3-3 function c_entry\n\
             5-10 class Engine\n\
             7-7 function Engine::run\n\
             11-11 struct Plain\n\
             12-12 union Bits\n\
             13-13 enum Color\n\
             14-14 function make_vec\n\
             15-17 function twice\n\
             18-19 struct Wide\n\
             20-21 function half_of\n"
        );
    }

    #[test]
    fn fingerprint_ignores_layout_and_comments_but_not_tokens() {
        let a = "template <typename T>\nT add(T a, T b) {\n  return a + b; // sum\n}\n";
        let b = "template <typename T> T add(\n    T a,\n    T b) { /* add */ return a+b; }";
        let c = "template <typename T>\nT add(T a, T b) {\n  return a - b;\n}\n";
        let fa = &scan(a).symbols()[0].fingerprint.clone();
        assert_eq!(fa, "template<typename T>T add(T a,T b){return a+b;}");
        assert_eq!(fa, &scan(b).symbols()[0].fingerprint);
        assert_ne!(fa, &scan(c).symbols()[0].fingerprint);
        assert_ne!(fingerprint("x = a - -b;"), fingerprint("x = a--b;"));
        assert_ne!(fingerprint(r#"s = "a  b";"#), fingerprint(r#"s = "a b";"#));
        assert_ne!(fingerprint("f(L \"x\")"), fingerprint("f(L\"x\")"));
        assert_eq!(fingerprint("#pragma unroll\n  x++;"), "#pragma unroll x++;");
    }

    #[test]
    fn malformed_input_degrades_without_panicking() {
        // Unbalanced closers are ignored, unclosed definitions are dropped.
        assert_eq!(names("}}} void ok() {} }"), ["ok"]);
        assert_eq!(names("void open() { if (x) {"), Vec::<String>::new());
        assert_eq!(names("#endif\n#else\nvoid ok() {}\n#if X\n"), ["ok"]);
        let samples = [
            METAL,
            "R\"abc( unterminated raw",
            "'\\",
            "/* open",
            "#define X \\",
            "void f( { ) } ] [ ; template < > ::",
            "operator",
            "namespace",
            "Ünïcödé ü(é) { \"é\\é\" '\u{1F600}' }",
        ];
        for sample in samples {
            let mut cut = 0;
            while cut <= sample.len() {
                let src = &sample[..cut];
                for s in scan(src).symbols() {
                    assert!(
                        s.span.start < s.span.end && s.span.end <= src.len(),
                        "{src:?}"
                    );
                    assert!(s.start_line <= s.end_line);
                    assert!(src.is_char_boundary(s.span.start) && src.is_char_boundary(s.span.end));
                }
                cut += 1;
                while cut < sample.len() && !sample.is_char_boundary(cut) {
                    cut += 1;
                }
            }
        }
    }
}
