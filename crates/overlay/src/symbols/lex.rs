//! The lexer: tokens, comments, literals and preprocessor directives of one source, never failing.

use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
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
pub(super) struct Token {
    pub(super) kind: Tok,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) line: u32,
    pub(super) first_on_line: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CondKind {
    /// `#if`, `#ifdef`, `#ifndef`; `dead` for a literal `#if 0`.
    If {
        dead: bool,
    },
    /// `#elif*` or `#else`.
    Else,
    Endif,
}

#[derive(Clone, Debug)]
pub(super) enum Item {
    Tok(usize),
    Cond(CondKind, usize),
    Define { name: String, span: Range<usize> },
}

pub(super) struct Lexed {
    pub(super) toks: Vec<Token>,
    pub(super) items: Vec<Item>,
    pub(super) comments: Vec<Range<usize>>,
    pub(super) literals: Vec<Range<usize>>,
}

pub(super) fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80
}

pub(super) fn is_ident_char(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// End of a `//` comment starting at `i`: the newline (exclusive), following
/// backslash-newline continuations as the preprocessor does.
pub(super) fn line_comment_end(b: &[u8], mut i: usize) -> usize {
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
pub(super) fn continued(b: &[u8], nl: usize) -> bool {
    let mut j = nl;
    if j > 0 && b[j - 1] == b'\r' {
        j -= 1;
    }
    j > 0 && b[j - 1] == b'\\'
}

pub(super) fn block_comment_end(b: &[u8], i: usize) -> usize {
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
pub(super) fn quoted_end(b: &[u8], q: usize) -> usize {
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
pub(super) fn raw_string_end(src: &str, q: usize) -> Option<usize> {
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

/// The token starting at `i` (not whitespace, a comment or a directive): its kind and where it
/// ends (an unterminated literal may end past the text; the caller clamps).
fn scan_token(src: &str, mut i: usize) -> (Tok, usize) {
    let b = src.as_bytes();
    let (start, c) = (i, b[i]);
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
    } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
        i = number_end(b, i);
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
    (kind, i)
}

/// End of the pp-number starting at `i`, digit separators (1'000) and exponents included.
fn number_end(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        let d = b[i];
        if is_ident_char(d) || d == b'.' {
            i += 1;
        } else if d == b'\'' && b.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric()) {
            i += 2;
        } else if (d == b'+' || d == b'-') && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P') {
            i += 1;
        } else {
            break;
        }
    }
    i
}

pub(super) fn lex(src: &str) -> Lexed {
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
        let kind;
        (kind, i) = scan_token(src, i);
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
pub(super) fn lex_directive(
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
