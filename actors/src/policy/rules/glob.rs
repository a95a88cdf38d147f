//! Tool-id globs with the semantics of Go's `path.Match`: `*` matches any run of characters
//! except `/`, `?` matches one character except `/`, `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]`
//! match one character of (or not of) a class (a negated class never matches `/`), and `\`
//! escapes the next character. Everything else, including `{`, `}` and `**`, is literal or a
//! plain star. A glob must match the whole tool id.
//!
//! Globs are translated to a `regex::Regex` once at load, so matching is linear in the tool id.
//! `globset` is not used because its `{a,b}` alternation and `**` rules differ from the
//! reference kernel's matcher.

use std::fmt::Write as _;

use regex::{Regex, RegexBuilder};

/// Compiled size limit of one glob's regex.
const GLOB_SIZE_LIMIT: usize = 1 << 20;

/// A compiled tool-id glob.
#[derive(Clone, Debug)]
pub struct Glob {
    pattern: String,
    regex: Regex,
}

impl Glob {
    /// Compiles a glob; returns a lowercase message naming the problem when it is malformed.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let source =
            translate(pattern).map_err(|problem| format!("bad glob `{pattern}`: {problem}"))?;
        let regex = RegexBuilder::new(&source)
            .size_limit(GLOB_SIZE_LIMIT)
            .build()
            .map_err(|error| format!("bad glob `{pattern}`: {error}"))?;
        Ok(Self {
            pattern: pattern.to_owned(),
            regex,
        })
    }

    /// Returns whether the whole of `text` matches the glob.
    pub fn is_match(&self, text: &str) -> bool {
        self.regex.is_match(text)
    }

    /// Returns the glob as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }
}

/// Translates a glob into an anchored regular expression.
fn translate(pattern: &str) -> Result<String, String> {
    let mut regex = String::from(r"\A");
    let mut chars = pattern.chars().peekable();
    while let Some(current) = chars.next() {
        match current {
            '*' => {
                while chars.peek() == Some(&'*') {
                    chars.next();
                }
                regex.push_str("[^/]*");
            }
            '?' => regex.push_str("[^/]"),
            '[' => translate_class(&mut chars, &mut regex)?,
            '\\' => {
                let escaped = chars.next().ok_or("trailing `\\` escapes nothing")?;
                push_escaped(&mut regex, escaped);
            }
            ']' => return Err("unmatched `]` (escape it as `\\]`)".to_owned()),
            other => push_escaped(&mut regex, other),
        }
    }
    regex.push_str(r"\z");
    Ok(regex)
}

/// Translates the class after a `[` up to its closing `]`.
fn translate_class(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    regex: &mut String,
) -> Result<(), String> {
    let negated = matches!(chars.peek(), Some('!' | '^'));
    if negated {
        chars.next();
    }
    regex.push_str(if negated { "[^/" } else { "[" });
    let mut items = 0;
    loop {
        let low = match chars.next() {
            None => return Err("unclosed `[`".to_owned()),
            Some(']') if items == 0 => return Err("empty class `[]`".to_owned()),
            Some(']') => break,
            Some(other) => class_char(other, chars)?,
        };
        items += 1;
        if chars.peek() == Some(&'-') {
            chars.next();
            let high = match chars.next() {
                None => return Err("unclosed `[`".to_owned()),
                Some(']') => {
                    return Err("range in class has no end (escape `-` as `\\-`)".to_owned());
                }
                Some(other) => class_char(other, chars)?,
            };
            if high < low {
                return Err(format!("range `{low}-{high}` is reversed"));
            }
            let _ = write!(
                regex,
                r"\x{{{:x}}}-\x{{{:x}}}",
                u32::from(low),
                u32::from(high)
            );
        } else {
            let _ = write!(regex, r"\x{{{:x}}}", u32::from(low));
        }
    }
    regex.push(']');
    Ok(())
}

/// Reads one class member, resolving `\` escapes; a bare `-` is ambiguous and rejected.
fn class_char(
    current: char,
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> Result<char, String> {
    match current {
        '\\' => chars
            .next()
            .ok_or_else(|| "trailing `\\` escapes nothing".to_owned()),
        '-' => Err("a bare `-` in a class is ambiguous (escape it as `\\-`)".to_owned()),
        other => Ok(other),
    }
}

/// Appends one literal character to a regex.
fn push_escaped(regex: &mut String, literal: char) {
    let mut buffer = [0_u8; 4];
    regex.push_str(&regex::escape(literal.encode_utf8(&mut buffer)));
}
