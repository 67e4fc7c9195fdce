//! The declaration-scope parser: classifies each `{` by the tokens since the previous declaration
//! boundary and gives the definitions it opens.

use std::ops::Range;

use super::lex::*;
use super::*;

/// Words that can precede `(` without naming a function being defined.
pub(super) const NOT_NAMES: &[&str] = &[
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
pub(super) const TRAILER_WORDS: &[&str] = &[
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
pub(super) struct Pending {
    pub(super) name: String,
    pub(super) path: Vec<String>,
    pub(super) kind: SymbolKind,
    pub(super) start: usize,
}

#[derive(Clone, Debug)]
pub(super) enum FrameKind {
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
pub(super) struct Frame {
    pub(super) kind: FrameKind,
    /// Token indices of the declaration being accumulated (declaration scopes).
    pub(super) head: Vec<usize>,
    /// Head positions of currently open `(` / `[`.
    pub(super) parens: Vec<usize>,
    /// Head position of the `(` of the last closed top-level paren group.
    pub(super) last_group: Option<usize>,
}

impl Frame {
    pub(super) fn new(kind: FrameKind) -> Self {
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
pub(super) struct State {
    pub(super) frames: Vec<Frame>,
}

pub(super) struct Cond {
    pub(super) at_if: State,
    pub(super) if_offset: usize,
    /// State at the end of the first live branch, and that branch's number.
    pub(super) kept: Option<(State, usize)>,
    pub(super) branch: usize,
    /// `out.len()` when each branch started.
    pub(super) branch_out_start: Vec<usize>,
    /// Whether the current branch is skipped (`#if 0`, or inside one).
    pub(super) dead: bool,
    pub(super) inherited_dead: bool,
}

pub(super) struct RawSymbol {
    pub(super) name: String,
    pub(super) qualified: String,
    pub(super) kind: SymbolKind,
    pub(super) span: Range<usize>,
}

pub(super) enum Head {
    Namespace(Vec<String>),
    Linkage,
    Class { kind: SymbolKind, path: Vec<String> },
    Function { path: Vec<String>, ctor_init: bool },
    Other,
}

pub(super) struct Parser<'a> {
    pub(super) toks: &'a [Token],
    pub(super) state: State,
    pub(super) conds: Vec<Cond>,
    pub(super) out: Vec<RawSymbol>,
}

impl Parser<'_> {
    pub(super) fn run(&mut self, src: &str, items: &[Item]) {
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

    pub(super) fn cond(&mut self, kind: CondKind, offset: usize) {
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
pub(super) fn starts_new_declaration(src: &str, toks: &[Token], f: &Frame, k: usize) -> bool {
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
pub(super) fn is_trailer<'s>(mut tokens: impl Iterator<Item = (Tok, &'s str)>) -> bool {
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

pub(super) fn tok_text<'s>(src: &'s str, toks: &[Token], k: usize) -> &'s str {
    &src[toks[k].start..toks[k].end]
}

/// Classifies the declaration head `head` (token indices) that precedes a
/// `{` in a declaration scope.
pub(super) fn analyze(src: &str, toks: &[Token], head: &[usize]) -> Head {
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

pub(super) fn is_class_key(s: &str) -> bool {
    matches!(s, "class" | "struct" | "union" | "enum")
}

/// Skips template headers, attributes and `typedef`/`export` at `i`.
pub(super) fn skip_prefix(src: &str, toks: &[Token], head: &[usize], mut i: usize) -> usize {
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

pub(super) fn open_delta(kind: Tok) -> i32 {
    match kind {
        Tok::Punct(b'(' | b'[' | b'{') => 1,
        Tok::Punct(b')' | b']' | b'}') => -1,
        _ => 0,
    }
}

/// Index of the group closer matching the opener at `i`, or the last index.
pub(super) fn match_group(toks: &[Token], head: &[usize], i: usize) -> usize {
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
pub(super) fn match_angle(toks: &[Token], head: &[usize], i: usize) -> usize {
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
pub(super) fn match_angle_back(toks: &[Token], head: &[usize], i: usize) -> Option<usize> {
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
pub(super) fn class_head(src: &str, toks: &[Token], head: &[usize], p: usize) -> Option<Head> {
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
pub(super) fn function_head(src: &str, toks: &[Token], head: &[usize], from: usize) -> Head {
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
pub(super) fn qualified_path(
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
