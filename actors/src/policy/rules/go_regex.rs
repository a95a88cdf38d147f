//! Go `regexp` syntax on the Rust `regex` crate. The two are nearly the same RE2 syntax; where
//! they differ, a `pattern` is rewritten before it is compiled so it means what Go means:
//!
//! - the Perl classes `\d \D \w \W \s \S` are ASCII-only in Go (`\d` is `[0-9]`, `\w` is
//!   `[0-9A-Za-z_]`, `\s` is `[\t\n\f\r ]`, without `\v`) and Unicode in Rust: they become
//!   explicit ASCII sets, in or out of a bracket class (`[\D]` becomes the nested class `[[^0-9]]`);
//! - the word boundaries `\b \B` are ASCII in Go: they become `(?-u:\b)` and `(?-u:\B)`;
//! - `\Q...\E` (to `\E` or the end) quotes literal text in Go: the text is escaped;
//! - inside a bracket class Go reads `[` (except `[:name:]`), `&&`, `--` and `~~` literally,
//!   where Rust nests classes or takes set operations: literal characters are escaped.
//!
//! The scanner follows Go's parser: an escape hides the character after it (`\\d` is a
//! backslash and a `d`), and a `]` right after `[` or `[^` is a literal. Anything it does not
//! rewrite is copied as is, so a pattern Go refuses is still refused by the `regex` crate.

use regex::{Regex, RegexBuilder};

/// Compiles a Go-syntax pattern with the given compiled size limit.
pub fn compile(source: &str, size_limit: usize) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&translate(source))
        .size_limit(size_limit)
        .build()
}

/// The ASCII set of a Perl class letter in Go, and whether the class is its negation.
fn perl_class(letter: char) -> Option<(&'static str, bool)> {
    const DIGIT: &str = "0-9";
    const WORD: &str = "0-9A-Za-z_";
    const SPACE: &str = r"\t\n\x0C\r ";
    match letter {
        'd' => Some((DIGIT, false)),
        'D' => Some((DIGIT, true)),
        'w' => Some((WORD, false)),
        'W' => Some((WORD, true)),
        's' => Some((SPACE, false)),
        'S' => Some((SPACE, true)),
        _ => None,
    }
}

/// Rewrites a Go-syntax pattern into Rust `regex` syntax with the same meaning.
pub fn translate(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len() + 16);
    let mut index = 0;
    while let Some(&current) = chars.get(index) {
        match (current, chars.get(index + 1)) {
            ('\\', Some(&letter)) => {
                index += 2;
                if let Some((set, negated)) = perl_class(letter) {
                    out.push_str(if negated { "[^" } else { "[" });
                    out.push_str(set);
                    out.push(']');
                } else if letter == 'b' || letter == 'B' {
                    out.push_str("(?-u:\\");
                    out.push(letter);
                    out.push(')');
                } else if letter == 'Q' {
                    let end = quote_end(&chars, index);
                    let quoted: String = chars[index..end].iter().collect();
                    out.push_str(&regex::escape(&quoted));
                    index = (end + 2).min(chars.len());
                } else {
                    out.push('\\');
                    out.push(letter);
                }
            }
            ('[', _) => index = translate_class(&chars, index, &mut out),
            _ => {
                out.push(current);
                index += 1;
            }
        }
    }
    out
}

/// Index of the `\E` closing a `\Q` quote whose text starts at `start` (the end if none).
fn quote_end(chars: &[char], start: usize) -> usize {
    (start..chars.len())
        .find(|&at| chars[at] == '\\' && chars.get(at + 1) == Some(&'E'))
        .unwrap_or(chars.len())
}

/// Translates the bracket class opening at `chars[start]` (a `[`) and returns the index after
/// it. An unclosed class is copied unclosed, for the `regex` crate to refuse.
fn translate_class(chars: &[char], start: usize, out: &mut String) -> usize {
    let mut index = start + 1;
    out.push('[');
    if chars.get(index) == Some(&'^') {
        out.push('^');
        index += 1;
    }
    let mut first = true;
    while let Some(&current) = chars.get(index) {
        if current == ']' && !first {
            out.push(']');
            return index + 1;
        }
        first = false;
        if current == '['
            && chars.get(index + 1) == Some(&':')
            && let Some(end) = posix_class_end(chars, index)
        {
            out.extend(&chars[index..end]);
            index = end;
            continue;
        }
        if current == '\\'
            && let Some(&letter) = chars.get(index + 1)
        {
            if let Some((set, negated)) = perl_class(letter) {
                if negated {
                    out.push_str("[^");
                    out.push_str(set);
                    out.push(']');
                } else {
                    out.push_str(set);
                }
                index += 2;
                continue;
            }
            if letter == 'p' || letter == 'P' {
                let end = unicode_class_end(chars, index);
                out.extend(&chars[index..end]);
                index = end;
                continue;
            }
        }
        index = class_char(chars, index, out);
        if chars.get(index) == Some(&'-') && chars.get(index + 1).is_some_and(|&next| next != ']') {
            out.push('-');
            index = class_char(chars, index + 1, out);
        }
    }
    index
}

/// End of a `[:name:]` class starting at `start`, as Go finds it (the first `:]` after it).
fn posix_class_end(chars: &[char], start: usize) -> Option<usize> {
    (start + 2..chars.len())
        .find(|&at| chars[at] == ':' && chars.get(at + 1) == Some(&']'))
        .map(|at| at + 2)
}

/// End of `\pL`, `\p{Name}` (or the `P` forms) starting at `start`.
fn unicode_class_end(chars: &[char], start: usize) -> usize {
    match chars.get(start + 2) {
        Some('{') => (start + 3..chars.len())
            .find(|&at| chars[at] == '}')
            .map_or(chars.len(), |at| at + 1),
        Some(_) => start + 3,
        None => chars.len(),
    }
}

/// Copies one class character (a literal, escaped for Rust, or a Go escape copied as is)
/// starting at `start`, returning the index after it.
fn class_char(chars: &[char], start: usize, out: &mut String) -> usize {
    let Some(&current) = chars.get(start) else {
        return start;
    };
    if current != '\\' {
        if matches!(current, '[' | ']' | '\\' | '-' | '&' | '~' | '^') {
            out.push('\\');
        }
        out.push(current);
        return start + 1;
    }
    let end = match chars.get(start + 1) {
        None => start + 1,
        Some('x') if chars.get(start + 2) == Some(&'{') => (start + 3..chars.len())
            .find(|&at| chars[at] == '}')
            .map_or(chars.len(), |at| at + 1),
        Some('x') => (start + 4).min(chars.len()),
        Some(_) => start + 2,
    };
    out.extend(&chars[start..end]);
    end
}
