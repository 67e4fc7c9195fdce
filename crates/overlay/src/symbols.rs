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

// ---------------------------------------------------------------------------
// Lexer

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Ident,
    Num,
    Str,
    Chr,
    /// `::`
    Scope,
    /// `->`
    Arrow,
    Punct(u8),
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Tok,
    start: usize,
    end: usize,
    line: u32,
    first_on_line: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CondKind {
    /// `#if`, `#ifdef`, `#ifndef`; `dead` for a literal `#if 0`.
    If {
        dead: bool,
    },
    /// `#elif*` or `#else`.
    Else,
    Endif,
}

#[derive(Clone, Debug)]
enum Item {
    Tok(usize),
    Cond(CondKind, usize),
    Define { name: String, span: Range<usize> },
}

struct Lexed {
    toks: Vec<Token>,
    items: Vec<Item>,
    comments: Vec<Range<usize>>,
    literals: Vec<Range<usize>>,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80
}

fn is_ident_char(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// End of a `//` comment starting at `i`: the newline (exclusive), following
/// backslash-newline continuations as the preprocessor does.
fn line_comment_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    while i < b.len() && b[i] == b'\n' && i > 0 && continued(b, i) {
        i += 1;
        while i < b.len() && b[i] != b'\n' {
            i += 1;
        }
    }
    i
}

/// Whether the newline at `nl` is preceded by a line-continuation backslash.
fn continued(b: &[u8], nl: usize) -> bool {
    let mut j = nl;
    if j > 0 && b[j - 1] == b'\r' {
        j -= 1;
    }
    j > 0 && b[j - 1] == b'\\'
}

fn block_comment_end(b: &[u8], i: usize) -> usize {
    let mut j = i + 2;
    while j + 1 < b.len() {
        if b[j] == b'*' && b[j + 1] == b'/' {
            return j + 2;
        }
        j += 1;
    }
    b.len()
}

/// End of a quoted literal whose opening quote is at `q`. Unterminated
/// literals stop at the end of the line so one stray quote cannot swallow
/// the rest of the file.
fn quoted_end(b: &[u8], q: usize) -> usize {
    let quote = b[q];
    let mut j = q + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'\n' => return j,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// End of a raw string whose `"` is at `q`, or `None` if the delimiter is
/// malformed (then it is lexed as an ordinary string).
fn raw_string_end(src: &str, q: usize) -> Option<usize> {
    let b = src.as_bytes();
    let open = q + 1 + b[q + 1..].iter().take(17).position(|&c| c == b'(')?;
    let delim = &src[q + 1..open];
    if delim
        .bytes()
        .any(|c| c.is_ascii_whitespace() || c == b'\\' || c == b')')
    {
        return None;
    }
    let close = format!("){delim}\"");
    Some(
        src[open + 1..]
            .find(&close)
            .map_or(b.len(), |p| open + 1 + p + close.len()),
    )
}

fn lex(src: &str) -> Lexed {
    let b = src.as_bytes();
    let mut toks: Vec<Token> = Vec::new();
    let mut items = Vec::new();
    let mut comments = Vec::new();
    let mut literals = Vec::new();
    let mut line: u32 = 1;
    let mut line_start = true;
    let mut last_tok_line = 0u32;
    let mut i = 0;
    let count_lines =
        |from: usize, to: usize| b[from..to].iter().filter(|&&c| c == b'\n').count() as u32;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'\\' && i + 1 < b.len() && (b[i + 1] == b'\n' || b[i + 1] == b'\r') {
            // Stray line continuation outside a directive: whitespace.
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = line_comment_end(b, i);
            line += count_lines(i, end);
            comments.push(i..end);
            i = end;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = block_comment_end(b, i);
            line += count_lines(i, end);
            comments.push(i..end);
            i = end;
            continue;
        }
        if c == b'#' && line_start {
            let end = lex_directive(src, i, &mut items, &mut comments, &mut literals);
            line += count_lines(i, end);
            i = end;
            continue;
        }
        let start = i;
        let kind = if is_ident_start(c) {
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            let word = &src[start..i];
            match b.get(i) {
                Some(b'"') if matches!(word, "R" | "LR" | "uR" | "UR" | "u8R") => {
                    i = raw_string_end(src, i).unwrap_or_else(|| quoted_end(b, i));
                    Tok::Str
                }
                Some(b'"') if matches!(word, "L" | "u" | "U" | "u8") => {
                    i = quoted_end(b, i);
                    Tok::Str
                }
                Some(b'\'') if matches!(word, "L" | "u" | "U" | "u8") => {
                    i = quoted_end(b, i);
                    Tok::Chr
                }
                _ => Tok::Ident,
            }
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // A pp-number, including digit separators (1'000) and exponents.
            i += 1;
            while i < b.len() {
                let d = b[i];
                if is_ident_char(d) || d == b'.' {
                    i += 1;
                } else if d == b'\'' && b.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()) {
                    i += 2;
                } else if (d == b'+' || d == b'-') && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P')
                {
                    i += 1;
                } else {
                    break;
                }
            }
            Tok::Num
        } else if c == b'"' {
            i = quoted_end(b, i);
            Tok::Str
        } else if c == b'\'' {
            i = quoted_end(b, i);
            Tok::Chr
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            i += 2;
            Tok::Scope
        } else if c == b'-' && b.get(i + 1) == Some(&b'>') {
            i += 2;
            Tok::Arrow
        } else {
            i += 1;
            Tok::Punct(c)
        };
        let i_end = i.min(b.len());
        if matches!(kind, Tok::Str | Tok::Chr) {
            literals.push(start..i_end);
        }
        toks.push(Token {
            kind,
            start,
            end: i_end,
            line,
            first_on_line: line != last_tok_line,
        });
        last_tok_line = line;
        line += count_lines(start, i_end);
        items.push(Item::Tok(toks.len() - 1));
        line_start = false;
        i = i_end;
    }
    Lexed {
        toks,
        items,
        comments,
        literals,
    }
}

/// Lexes the directive starting at `#` (`start`) through its last
/// continuation line and returns the offset of the terminating newline.
fn lex_directive(
    src: &str,
    start: usize,
    items: &mut Vec<Item>,
    comments: &mut Vec<Range<usize>>,
    literals: &mut Vec<Range<usize>>,
) -> usize {
    let b = src.as_bytes();
    let mut i = start + 1;
    let mut text = String::new();
    while i < b.len() {
        match b[i] {
            b'\n' if continued(b, i) => {
                text.push(' ');
                i += 1;
            }
            b'\n' => break,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = line_comment_end(b, i);
                comments.push(i..end);
                i = end;
                break;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = block_comment_end(b, i);
                comments.push(i..end);
                text.push(' ');
                i = end;
            }
            b'"' | b'\'' => {
                let end = quoted_end(b, i);
                literals.push(i..end);
                text.push_str(&src[i..end]);
                i = end;
            }
            b'\\' => {
                i += 1;
            }
            _ => {
                let ch_end = (i + 1..=b.len())
                    .find(|&e| src.is_char_boundary(e))
                    .unwrap_or(b.len());
                text.push_str(&src[i..ch_end]);
                i = ch_end;
            }
        }
    }
    let end = i.min(b.len());
    let rest = text.trim_start();
    let word_len = rest.bytes().take_while(|&c| is_ident_char(c)).count();
    let (word, args) = rest.split_at(word_len);
    match word {
        "if" => items.push(Item::Cond(
            CondKind::If {
                dead: args.trim() == "0",
            },
            start,
        )),
        "ifdef" | "ifndef" => items.push(Item::Cond(CondKind::If { dead: false }, start)),
        "elif" | "elifdef" | "elifndef" | "else" => items.push(Item::Cond(CondKind::Else, start)),
        "endif" => items.push(Item::Cond(CondKind::Endif, start)),
        "define" => {
            let args = args.trim_start();
            let n = args.bytes().take_while(|&c| is_ident_char(c)).count();
            if n > 0 {
                let mut span_end = end;
                // Do not let the span end on a trailing "\r".
                while span_end > start && b[span_end - 1].is_ascii_whitespace() {
                    span_end -= 1;
                }
                items.push(Item::Define {
                    name: args[..n].to_string(),
                    span: start..span_end,
                });
            }
        }
        _ => {}
    }
    end
}

// ---------------------------------------------------------------------------
// Parser

/// Words that can precede `(` without naming a function being defined.
const NOT_NAMES: &[&str] = &[
    "if",
    "for",
    "while",
    "switch",
    "return",
    "sizeof",
    "alignof",
    "decltype",
    "alignas",
    "__attribute__",
    "__attribute",
    "__declspec",
    "noexcept",
    "static_assert",
    "typeid",
    "throw",
    "catch",
    "requires",
    "_Pragma",
    "asm",
    "__asm__",
    "__asm",
    "defined",
    "void",
    "int",
    "char",
    "bool",
    "float",
    "double",
    "short",
    "long",
    "unsigned",
    "signed",
    "auto",
    "const",
    "volatile",
    "new",
    "delete",
    "using",
    "typedef",
    "case",
    "do",
    "else",
    "goto",
    "co_return",
    "co_await",
    "co_yield",
    "constexpr",
    "consteval",
    "constinit",
    "explicit",
    "virtual",
    "static",
    "inline",
    "extern",
    "template",
    "typename",
    "class",
    "struct",
    "union",
    "enum",
    "namespace",
    "operator",
    "__typeof__",
    "typeof",
    "_Alignas",
    "_Static_assert",
    "_Generic",
];

/// Tokens that may follow a function's parameter list before its body;
/// Metal adds address-space qualifiers for member functions (`) const thread`).
const TRAILER_WORDS: &[&str] = &[
    "const",
    "volatile",
    "noexcept",
    "override",
    "final",
    "requires",
    "throw",
    "try",
    "mutable",
    "__attribute__",
    "__attribute",
    "thread",
    "device",
    "constant",
    "threadgroup",
    "constexpr",
];

#[derive(Clone, Debug)]
struct Pending {
    name: String,
    path: Vec<String>,
    kind: SymbolKind,
    start: usize,
}

#[derive(Clone, Debug)]
enum FrameKind {
    Root,
    Namespace(Vec<String>),
    /// `extern "C" { ... }`
    Linkage,
    /// Class/struct/union body: a declaration scope whose members are indexed.
    Class(Option<Pending>),
    /// Function or enum body, initializer, or an unclassified block: its
    /// contents are not indexed, only its braces are counted.
    Body(Option<Pending>),
    /// A brace inside a declaration head (default argument `= {}`, a
    /// constructor's `member_{x}` initializer): the head continues after it.
    HeadBrace,
}

#[derive(Clone, Debug)]
struct Frame {
    kind: FrameKind,
    /// Token indices of the declaration being accumulated (declaration scopes).
    head: Vec<usize>,
    /// Head positions of currently open `(` / `[`.
    parens: Vec<usize>,
    /// Head position of the `(` of the last closed top-level paren group.
    last_group: Option<usize>,
}

impl Frame {
    fn new(kind: FrameKind) -> Self {
        Frame {
            kind,
            head: Vec::new(),
            parens: Vec::new(),
            last_group: None,
        }
    }

    fn is_decl_scope(&self) -> bool {
        matches!(
            self.kind,
            FrameKind::Root | FrameKind::Namespace(_) | FrameKind::Linkage | FrameKind::Class(_)
        )
    }

    fn reset_head(&mut self) {
        self.head.clear();
        self.parens.clear();
        self.last_group = None;
    }
}

#[derive(Clone, Debug)]
struct State {
    frames: Vec<Frame>,
}

struct Cond {
    at_if: State,
    if_offset: usize,
    /// State at the end of the first live branch, and that branch's number.
    kept: Option<(State, usize)>,
    branch: usize,
    /// `out.len()` when each branch started.
    branch_out_start: Vec<usize>,
    /// Whether the current branch is skipped (`#if 0`, or inside one).
    dead: bool,
    inherited_dead: bool,
}

struct RawSymbol {
    name: String,
    qualified: String,
    kind: SymbolKind,
    span: Range<usize>,
}

enum Head {
    Namespace(Vec<String>),
    Linkage,
    Class { kind: SymbolKind, path: Vec<String> },
    Function { path: Vec<String>, ctor_init: bool },
    Other,
}

struct Parser<'a> {
    toks: &'a [Token],
    state: State,
    conds: Vec<Cond>,
    out: Vec<RawSymbol>,
}

impl Parser<'_> {
    fn run(&mut self, src: &str, items: &[Item]) {
        for (n, item) in items.iter().enumerate() {
            match item {
                Item::Cond(kind, offset) => self.cond(*kind, *offset),
                _ if self.conds.iter().any(|c| c.dead) => {}
                Item::Define { name, span } => self.out.push(RawSymbol {
                    name: name.clone(),
                    qualified: name.clone(),
                    kind: SymbolKind::Macro,
                    span: span.clone(),
                }),
                Item::Tok(k) => {
                    // A class definition's span takes in the `;` of `};`.
                    let next_semicolon = match items.get(n + 1) {
                        Some(Item::Tok(j)) if self.toks[*j].kind == Tok::Punct(b';') => {
                            Some(self.toks[*j].end)
                        }
                        _ => None,
                    };
                    self.token(src, *k, next_semicolon);
                }
            }
        }
    }

    fn cond(&mut self, kind: CondKind, offset: usize) {
        match kind {
            CondKind::If { dead } => {
                let inherited_dead = self.conds.iter().any(|c| c.dead);
                self.conds.push(Cond {
                    at_if: self.state.clone(),
                    if_offset: offset,
                    kept: None,
                    branch: 0,
                    branch_out_start: vec![self.out.len()],
                    dead: dead || inherited_dead,
                    inherited_dead,
                });
            }
            CondKind::Else => {
                let Some(c) = self.conds.last_mut() else {
                    return;
                };
                if !c.dead && c.kept.is_none() {
                    c.kept = Some((self.state.clone(), c.branch));
                }
                self.state = c.at_if.clone();
                c.branch += 1;
                c.branch_out_start.push(self.out.len());
                c.dead = c.inherited_dead;
            }
            CondKind::Endif => {
                let Some(mut c) = self.conds.pop() else {
                    return;
                };
                if !c.dead && c.kept.is_none() {
                    c.kept = Some((
                        std::mem::replace(&mut self.state, c.at_if.clone()),
                        c.branch,
                    ));
                }
                let kept_branch = match c.kept {
                    Some((state, branch)) => {
                        self.state = state;
                        Some(branch)
                    }
                    None => {
                        self.state = c.at_if;
                        None
                    }
                };
                // A definition opened before the `#if` and closed in a branch
                // that was not kept would be reported twice: drop it.
                let first = c.branch_out_start[0];
                let starts = &c.branch_out_start;
                let if_offset = c.if_offset;
                let tail: Vec<RawSymbol> = self.out.drain(first..).collect();
                for (idx, sym) in (first..).zip(tail) {
                    // starts[0] == first <= idx, so this does not underflow.
                    let branch = starts.partition_point(|&s| s <= idx) - 1;
                    if Some(branch) == kept_branch || sym.span.start >= if_offset {
                        self.out.push(sym);
                    }
                }
            }
        }
    }

    fn top(&mut self) -> &mut Frame {
        // The root frame is never popped.
        self.state.frames.last_mut().expect("root frame")
    }

    fn token(&mut self, src: &str, k: usize, next_semicolon: Option<usize>) {
        let t = self.toks[k];
        if !self.top().is_decl_scope() {
            match t.kind {
                Tok::Punct(b'{') => self.state.frames.push(Frame::new(FrameKind::Body(None))),
                Tok::Punct(b'}') => self.close(k, next_semicolon),
                _ => {}
            }
            return;
        }
        let toks = self.toks;
        let in_class = matches!(self.top().kind, FrameKind::Class(_));
        let f = self.top();
        let depth = f.parens.len();
        match t.kind {
            Tok::Punct(b'(' | b'[') => {
                f.parens.push(f.head.len());
                f.head.push(k);
            }
            Tok::Punct(b')' | b']') => {
                if let Some(open) = f.parens.pop()
                    && f.parens.is_empty()
                {
                    f.last_group = Some(open);
                }
                f.head.push(k);
            }
            Tok::Punct(b'{') if depth > 0 => {
                f.head.push(k);
                self.state.frames.push(Frame::new(FrameKind::HeadBrace));
            }
            Tok::Punct(b'{') => self.open_brace(src, k),
            Tok::Punct(b'}') => self.close(k, next_semicolon),
            // Inside parens a `;` means the parens were unbalanced; recover.
            Tok::Punct(b';' | b'@') => f.reset_head(),
            Tok::Punct(b':')
                if in_class
                    && f.head.len() == 1
                    && matches!(
                        &src[toks[f.head[0]].start..toks[f.head[0]].end],
                        "public" | "private" | "protected"
                    ) =>
            {
                f.reset_head()
            }
            _ => {
                if depth == 0 && starts_new_declaration(src, toks, f, k) {
                    f.reset_head();
                }
                f.head.push(k);
            }
        }
    }

    fn open_brace(&mut self, src: &str, k: usize) {
        let toks = self.toks;
        let prefix = self.scope_path();
        let f = self.top();
        let head: Vec<usize> = f.head.clone();
        let start = head.first().map_or(toks[k].start, |&h| toks[h].start);
        let kind = match analyze(src, toks, &head) {
            Head::Namespace(parts) => FrameKind::Namespace(parts),
            Head::Linkage => FrameKind::Linkage,
            Head::Class { kind, path } => {
                let pending = (!path.is_empty()).then(|| Pending {
                    name: path.last().cloned().unwrap_or_default(),
                    path: prefix.iter().cloned().chain(path).collect(),
                    kind,
                    start,
                });
                if kind == SymbolKind::Enum {
                    FrameKind::Body(pending)
                } else {
                    FrameKind::Class(pending)
                }
            }
            Head::Function { path, ctor_init } => {
                let prev = head.last().map(|&h| toks[h].kind);
                if ctor_init && matches!(prev, Some(Tok::Ident | Tok::Punct(b'>'))) {
                    // `Foo() : member_{x}`: a braced member initializer.
                    f.head.push(k);
                    self.state.frames.push(Frame::new(FrameKind::HeadBrace));
                    return;
                }
                FrameKind::Body(Some(Pending {
                    name: path.last().cloned().unwrap_or_default(),
                    path: prefix.iter().cloned().chain(path).collect(),
                    kind: SymbolKind::Function,
                    start,
                }))
            }
            Head::Other => FrameKind::Body(None),
        };
        f.reset_head();
        self.state.frames.push(Frame::new(kind));
    }

    fn close(&mut self, k: usize, next_semicolon: Option<usize>) {
        if self.state.frames.len() == 1 {
            // Unbalanced `}`: ignore it, forget the partial declaration.
            self.top().reset_head();
            return;
        }
        let Some(frame) = self.state.frames.pop() else {
            return;
        };
        let end = self.toks[k].end;
        match frame.kind {
            FrameKind::Class(Some(p)) | FrameKind::Body(Some(p)) => {
                let end = match (p.kind, next_semicolon) {
                    (SymbolKind::Function, _) | (_, None) => end,
                    (_, Some(semi)) => semi,
                };
                self.out.push(RawSymbol {
                    qualified: p.path.join("::"),
                    name: p.name,
                    kind: p.kind,
                    span: p.start..end,
                });
            }
            FrameKind::HeadBrace => self.top().head.push(k),
            _ => {}
        }
    }

    /// Qualification contributed by the enclosing namespaces and classes.
    fn scope_path(&self) -> Vec<String> {
        let mut path = Vec::new();
        for f in &self.state.frames {
            match &f.kind {
                FrameKind::Namespace(parts) => path.extend(parts.iter().cloned()),
                FrameKind::Class(Some(p)) => path = p.path.clone(),
                _ => {}
            }
        }
        path
    }
}

/// Whether token `t` cannot continue the declaration accumulated in `f` and
/// must start a new one. This catches macro invocations written without a
/// trailing `;` (`instantiate_kernel(...)` lines) so they do not become part
/// of the next definition's span.
fn starts_new_declaration(src: &str, toks: &[Token], f: &Frame, k: usize) -> bool {
    let Some(&prev_k) = f.head.last() else {
        return false;
    };
    let t = toks[k];
    let text = tok_text(src, toks, k);
    let prev = toks[prev_k];
    let prev_text = &src[prev.start..prev.end];
    if text == "template" {
        return !(matches!(
            prev.kind,
            Tok::Punct(b'>' | b'<' | b',' | b'(') | Tok::Scope | Tok::Arrow
        ) || matches!(prev_text, "extern" | "typename" | "."));
    }
    // `NAME(...)` alone on its line(s), followed on a later line by
    // something that cannot trail a function declarator.
    if prev.kind != Tok::Punct(b')') || t.line <= prev.line {
        return false;
    }
    let Some(open) = f.last_group else {
        return false;
    };
    let Some(&name_k) = open.checked_sub(1).and_then(|o| f.head.get(o)) else {
        return false;
    };
    let name = toks[name_k];
    if name.kind != Tok::Ident || !name.first_on_line {
        return false;
    }
    !is_trailer((k..toks.len()).map(|j| (toks[j].kind, tok_text(src, toks, j))))
}

/// Whether `tokens`, which follow a parameter list, can be a function
/// declarator's trailer (`const thread`, `noexcept(...)`, `-> T`, `: init`)
/// up to the body. The words must be followed by something only a trailer
/// has, so `FOO()` + `const char* name() {` is not read as `FOO() const`.
fn is_trailer<'s>(mut tokens: impl Iterator<Item = (Tok, &'s str)>) -> bool {
    loop {
        match tokens.next() {
            // Whatever follows is a constraint, not a declaration.
            None | Some((Tok::Ident, "requires")) => return true,
            Some((Tok::Ident, w)) if TRAILER_WORDS.contains(&w) => {}
            Some((Tok::Punct(b'&'), _)) => {}
            Some((Tok::Arrow, _)) => return true,
            Some((Tok::Punct(c), _)) => return b":(={;,".contains(&c),
            _ => return false,
        }
    }
}

fn tok_text<'s>(src: &'s str, toks: &[Token], k: usize) -> &'s str {
    &src[toks[k].start..toks[k].end]
}

/// Classifies the declaration head `head` (token indices) that precedes a
/// `{` in a declaration scope.
fn analyze(src: &str, toks: &[Token], head: &[usize]) -> Head {
    let text = |i: usize| head.get(i).map_or("", |&k| tok_text(src, toks, k));
    let kind = |i: usize| head.get(i).map(|&k| toks[k].kind);
    if head.is_empty() {
        return Head::Other;
    }

    // namespace a::b {, inline namespace v1 {, namespace {
    let ns = usize::from(text(0) == "inline");
    if text(ns) == "namespace" {
        let parts = (ns + 1..head.len())
            .filter(|&i| kind(i) == Some(Tok::Ident) && text(i) != "inline")
            .map(|i| text(i).to_string())
            .collect();
        return Head::Namespace(parts);
    }
    if head.len() == 2 && text(0) == "extern" && kind(1) == Some(Tok::Str) {
        return Head::Linkage;
    }

    let mut p = skip_prefix(src, toks, head, 0);
    if text(p) == "requires"
        && let Some(key) = (p..head.len()).find(|&i| is_class_key(text(i)))
    {
        p = key;
    }
    if is_class_key(text(p))
        && let Some(h) = class_head(src, toks, head, p)
    {
        return h;
    }
    function_head(src, toks, head, skip_prefix(src, toks, head, 0))
}

fn is_class_key(s: &str) -> bool {
    matches!(s, "class" | "struct" | "union" | "enum")
}

/// Skips template headers, attributes and `typedef`/`export` at `i`.
fn skip_prefix(src: &str, toks: &[Token], head: &[usize], mut i: usize) -> usize {
    loop {
        let text = head.get(i).map_or("", |&k| tok_text(src, toks, k));
        let kind = |j: usize| head.get(j).map(|&k| toks[k].kind);
        if text == "template" {
            i += 1;
            if kind(i) == Some(Tok::Punct(b'<')) {
                i = match_angle(toks, head, i) + 1;
            }
        } else if kind(i) == Some(Tok::Punct(b'[')) && kind(i + 1) == Some(Tok::Punct(b'[')) {
            i = match_group(toks, head, i) + 1;
        } else if matches!(
            text,
            "__attribute__" | "__attribute" | "__declspec" | "alignas"
        ) && kind(i + 1) == Some(Tok::Punct(b'('))
        {
            i = match_group(toks, head, i + 1) + 1;
        } else if matches!(text, "typedef" | "export") {
            i += 1;
        } else {
            return i.min(head.len());
        }
    }
}

fn open_delta(kind: Tok) -> i32 {
    match kind {
        Tok::Punct(b'(' | b'[' | b'{') => 1,
        Tok::Punct(b')' | b']' | b'}') => -1,
        _ => 0,
    }
}

/// Index of the group closer matching the opener at `i`, or the last index.
fn match_group(toks: &[Token], head: &[usize], i: usize) -> usize {
    let mut depth = 0;
    for (j, &k) in head.iter().enumerate().skip(i) {
        depth += open_delta(toks[k].kind);
        if depth <= 0 {
            return j;
        }
    }
    head.len().saturating_sub(1)
}

/// Index of the `>` closing the `<` at `i`. Comparisons inside parentheses
/// (`int N = (4 > 2)`) do not count, which is how C++ disambiguates too.
fn match_angle(toks: &[Token], head: &[usize], i: usize) -> usize {
    let mut angle = 0;
    let mut depth = 0;
    for (j, &k) in head.iter().enumerate().skip(i) {
        let kind = toks[k].kind;
        depth += open_delta(kind);
        if depth == 0 {
            match kind {
                Tok::Punct(b'<') => angle += 1,
                Tok::Punct(b'>') => {
                    angle -= 1;
                    if angle == 0 {
                        return j;
                    }
                }
                _ => {}
            }
        }
    }
    head.len().saturating_sub(1)
}

/// Index of the `<` matching the `>` at `i`, searching backwards.
fn match_angle_back(toks: &[Token], head: &[usize], i: usize) -> Option<usize> {
    let mut angle = 0;
    let mut depth = 0;
    for j in (0..=i).rev() {
        let kind = toks[head[j]].kind;
        depth -= open_delta(kind);
        if depth == 0 {
            match kind {
                Tok::Punct(b'>') => angle += 1,
                Tok::Punct(b'<') => {
                    angle -= 1;
                    if angle == 0 {
                        return Some(j);
                    }
                }
                _ => {}
            }
        }
    }
    None
}

/// `class [attrs] [MACROS] A::B<args> [final] [: bases]` with the class key
/// at `p`; `None` if the tokens do not form a class head (e.g. a C function
/// returning `struct Foo*`).
fn class_head(src: &str, toks: &[Token], head: &[usize], p: usize) -> Option<Head> {
    let text = |i: usize| head.get(i).map_or("", |&k| tok_text(src, toks, k));
    let kind_at = |i: usize| head.get(i).map(|&k| toks[k].kind);
    let kind = match text(p) {
        "class" => SymbolKind::Class,
        "struct" => SymbolKind::Struct,
        "union" => SymbolKind::Union,
        _ => SymbolKind::Enum,
    };
    let mut j = p + 1;
    if kind == SymbolKind::Enum && matches!(text(j), "class" | "struct") {
        j += 1;
    }
    let mut chain: Vec<String> = Vec::new();
    let mut after_scope = false;
    while j < head.len() {
        match kind_at(j) {
            Some(Tok::Ident)
                if text(j) == "final"
                    && matches!(kind_at(j + 1), None | Some(Tok::Punct(b':'))) =>
            {
                break;
            }
            Some(Tok::Ident)
                if matches!(
                    text(j),
                    "__attribute__" | "__attribute" | "__declspec" | "alignas"
                ) && kind_at(j + 1) == Some(Tok::Punct(b'(')) =>
            {
                j = match_group(toks, head, j + 1);
            }
            Some(Tok::Ident) => {
                if !after_scope {
                    // `class EXPORT_API Foo`: only the last chain names the class.
                    chain.clear();
                }
                chain.push(text(j).to_string());
                after_scope = false;
            }
            Some(Tok::Scope) => after_scope = true,
            Some(Tok::Punct(b'<')) => j = match_angle(toks, head, j),
            Some(Tok::Punct(b'[')) if kind_at(j + 1) == Some(Tok::Punct(b'[')) => {
                j = match_group(toks, head, j);
            }
            Some(Tok::Punct(b':')) => break,
            _ => return None,
        }
        j += 1;
    }
    Some(Head::Class { kind, path: chain })
}

/// Finds the declarator `name(params)` whose parameter list is followed only
/// by things that may trail a function declarator.
fn function_head(src: &str, toks: &[Token], head: &[usize], from: usize) -> Head {
    let text = |i: usize| head.get(i).map_or("", |&k| tok_text(src, toks, k));
    let kind_at = |i: usize| head.get(i).map(|&k| toks[k].kind);
    let b = src.as_bytes();
    let mut fallback: Option<Head> = None;
    let mut depth = 0;
    let mut i = from;
    while i < head.len() {
        let kind = toks[head[i]].kind;
        if depth == 0 {
            let mut candidate: Option<(usize, String, usize)> = None; // (name index, name, params index)
            if kind == Tok::Ident && text(i) == "operator" {
                // operator() / operator== / operator bool / operator new[]
                let mut j = i + 1;
                let mut name = String::from("operator");
                if kind_at(j) == Some(Tok::Punct(b'(')) && kind_at(j + 1) == Some(Tok::Punct(b')'))
                {
                    name.push_str("()");
                    j += 2;
                }
                while j < head.len() && kind_at(j) != Some(Tok::Punct(b'(')) {
                    if kind_at(j) == Some(Tok::Ident)
                        && name.bytes().last().is_some_and(is_ident_char)
                    {
                        name.push(' ');
                    }
                    name.push_str(text(j));
                    j += 1;
                }
                if j < head.len() {
                    candidate = Some((i, name, j));
                }
            } else if kind == Tok::Punct(b'(') && i > from {
                let before = i - 1;
                match kind_at(before) {
                    Some(Tok::Ident) if !NOT_NAMES.contains(&text(before)) => {
                        if kind_at(before.wrapping_sub(1)) == Some(Tok::Punct(b'~')) {
                            candidate = Some((before - 1, format!("~{}", text(before)), i));
                        } else {
                            candidate = Some((before, text(before).to_string(), i));
                        }
                    }
                    // `template <> void f<int>(int)`
                    Some(Tok::Punct(b'>')) => {
                        if let Some(lt) = match_angle_back(toks, head, before)
                            && lt > from
                            && kind_at(lt - 1) == Some(Tok::Ident)
                            && !NOT_NAMES.contains(&text(lt - 1))
                            && text(lt - 1) != "operator"
                        {
                            candidate = Some((lt - 1, text(lt - 1).to_string(), i));
                        }
                    }
                    _ => {}
                }
            } else if kind == Tok::Punct(b'=') {
                let s = toks[head[i]].start;
                let compound =
                    b.get(s + 1) == Some(&b'=') || (s > 0 && b"=!<>+-*/%&|^".contains(&b[s - 1]));
                if !compound {
                    // `auto f = [](...) {`, `T table[] = {`: an initializer.
                    return Head::Other;
                }
            }
            if let Some((name_i, name, params)) = candidate {
                let close = match_group(toks, head, params);
                let after = close + 1;
                let path = qualified_path(src, toks, head, name_i, from, name);
                let ctor_init = (after..head.len()).any(|j| kind_at(j) == Some(Tok::Punct(b':')));
                if is_trailer((after..head.len()).map(|j| (toks[head[j]].kind, text(j)))) {
                    return Head::Function { path, ctor_init };
                }
                // `void f() SOME_ATTR {`: only words after the parameters.
                if fallback.is_none() && (after..head.len()).all(|j| kind_at(j) == Some(Tok::Ident))
                {
                    fallback = Some(Head::Function {
                        path,
                        ctor_init: false,
                    });
                }
                i = close + 1;
                continue;
            }
        }
        depth += open_delta(kind);
        depth = depth.max(0);
        i += 1;
    }
    fallback.unwrap_or(Head::Other)
}

/// `A<T>::B::name` → `[A, B, name]`, walking back from the name at `i`.
fn qualified_path(
    src: &str,
    toks: &[Token],
    head: &[usize],
    i: usize,
    from: usize,
    name: String,
) -> Vec<String> {
    let kind_at = |j: usize| head.get(j).map(|&k| toks[k].kind);
    let mut path = vec![name];
    let mut i = i;
    while i >= from + 2 && kind_at(i - 1) == Some(Tok::Scope) {
        let mut q = i - 2;
        if kind_at(q) == Some(Tok::Punct(b'>')) {
            match match_angle_back(toks, head, q) {
                Some(lt) if lt > from => q = lt - 1,
                _ => break,
            }
        }
        if kind_at(q) != Some(Tok::Ident) {
            break;
        }
        path.push(tok_text(src, toks, head[q]).to_string());
        i = q;
    }
    path.reverse();
    path
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
