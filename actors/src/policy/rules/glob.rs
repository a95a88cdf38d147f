//! Tool-id globs that match exactly as Go's `path.Match` does, because the reference kernel
//! matches `tool_id`/`tool_ids` with it:
//!
//! - `*` matches any run of characters except `/`; `?` matches one character except `/`;
//! - `[abc]`, `[a-z]` match one character of the class, `[^a-z]` one character not in it — and
//!   a class, negated or not, can match `/`; `!` is an ordinary character (`[!a]` is `!` or `a`);
//! - `\` makes the next character literal, inside a class too;
//! - everything else (`]`, `{`, `}`, `-` outside a class, ...) is literal; the whole id must match.
//!
//! Malformed patterns — the ones for which `path.Match` returns `ErrBadPattern` — are refused
//! when the policy loads (the reference kernel would quietly compare them as plain strings): an
//! unclosed or empty class, a `-` or `]` where a class member is expected, a trailing `\`.
//!
//! Matching follows Go's algorithm step for step, bytes included: the pattern is split into
//! chunks at each `*`; each chunk is matched at the first place it fits (a star skips one byte
//! at a time, never past a `/`), the last one where it ends the name. So results agree with Go
//! even on odd inputs (a star can stop inside a multi-byte character). Matching costs at most
//! the pattern length times the id length; tool ids are short.

/// A compiled tool-id glob.
#[derive(Clone, Debug)]
pub struct Glob {
    pattern: String,
    chunks: Vec<Chunk>,
}

/// A run of single-character items, optionally preceded by stars.
#[derive(Clone, Debug)]
struct Chunk {
    /// Whether one or more `*` come before the items.
    star: bool,
    /// The items, each matching one character (or one byte of a literal).
    items: Vec<Item>,
}

/// One item of a chunk.
#[derive(Clone, Debug)]
enum Item {
    /// One byte of a literal character.
    Byte(u8),
    /// `?`: one character other than `/`.
    AnyButSlash,
    /// `[...]`: one character in (or, negated, not in) the ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    /// Compiles a glob; returns a lowercase message naming the problem when Go's `path.Match`
    /// would call the pattern malformed.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let chunks = split_chunks(pattern)
            .into_iter()
            .map(|(star, text)| {
                Ok(Chunk {
                    star,
                    items: parse_items(text)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|problem| format!("bad glob `{pattern}`: {problem}"))?;
        Ok(Self {
            pattern: pattern.to_owned(),
            chunks,
        })
    }

    /// Returns whether the whole of `text` matches the glob.
    pub fn is_match(&self, text: &str) -> bool {
        let mut name = text.as_bytes();
        for (index, chunk) in self.chunks.iter().enumerate() {
            let is_last = index + 1 == self.chunks.len();
            if chunk.star && chunk.items.is_empty() {
                // Trailing stars: the rest of the name must hold no `/`.
                return !name.contains(&b'/');
            }
            if let Some(rest) = chunk.match_prefix(name)
                && (rest.is_empty() || !is_last)
            {
                name = rest;
                continue;
            }
            if !chunk.star {
                return false;
            }
            let mut advanced = None;
            for skipped in 0..name.len() {
                if name[skipped] == b'/' {
                    break;
                }
                if let Some(rest) = chunk.match_prefix(&name[skipped + 1..]) {
                    if is_last && !rest.is_empty() {
                        continue;
                    }
                    advanced = Some(rest);
                    break;
                }
            }
            match advanced {
                Some(rest) => name = rest,
                None => return false,
            }
        }
        name.is_empty()
    }

    /// Returns the glob as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Returns things that are valid but probably not what the author meant: reversed ranges
    /// (which match nothing) and classes starting with `!` (which do not negate).
    pub fn oddities(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for item in self.chunks.iter().flat_map(|chunk| &chunk.items) {
            let Item::Class { negated, ranges } = item else {
                continue;
            };
            for (low, high) in ranges {
                if high < low {
                    notes.push(format!(
                        "glob `{}`: range `{low}-{high}` is reversed and matches nothing",
                        self.pattern
                    ));
                }
            }
            if !negated && ranges.first() == Some(&('!', '!')) {
                notes.push(format!(
                    "glob `{}`: `[!...]` is a class that matches `!`; negate a class with `[^...]`",
                    self.pattern
                ));
            }
        }
        notes
    }
}

impl Chunk {
    /// Matches the items at the start of `name`; returns the rest of the name on success.
    fn match_prefix<'n>(&self, name: &'n [u8]) -> Option<&'n [u8]> {
        let mut rest = name;
        for item in &self.items {
            let first = *rest.first()?;
            match item {
                Item::Byte(byte) => {
                    if first != *byte {
                        return None;
                    }
                    rest = &rest[1..];
                }
                Item::AnyButSlash => {
                    if first == b'/' {
                        return None;
                    }
                    rest = &rest[decode(rest).1..];
                }
                Item::Class { negated, ranges } => {
                    let (character, width) = decode(rest);
                    let inside = ranges
                        .iter()
                        .any(|(low, high)| *low <= character && character <= *high);
                    if inside == *negated {
                        return None;
                    }
                    rest = &rest[width..];
                }
            }
        }
        Some(rest)
    }
}

/// Splits a pattern into `(stars before, text)` chunks at every `*` outside a class.
fn split_chunks(pattern: &str) -> Vec<(bool, &str)> {
    let bytes = pattern.as_bytes();
    let mut chunks = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let mut star = false;
        while position < bytes.len() && bytes[position] == b'*' {
            star = true;
            position += 1;
        }
        let start = position;
        let mut in_class = false;
        while position < bytes.len() {
            match bytes[position] {
                b'\\' if position + 1 < bytes.len() => position += 1,
                b'[' => in_class = true,
                b']' => in_class = false,
                b'*' if !in_class => break,
                _ => {}
            }
            position += 1;
        }
        chunks.push((star, &pattern[start..position]));
    }
    chunks
}

/// Parses the items of one chunk.
fn parse_items(chunk: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut rest = chunk;
    while let Some(current) = rest.chars().next() {
        match current {
            '[' => {
                let (item, after) = parse_class(&rest[1..])?;
                items.push(item);
                rest = after;
            }
            '?' => {
                items.push(Item::AnyButSlash);
                rest = &rest[1..];
            }
            '\\' => {
                let escaped = rest[1..]
                    .chars()
                    .next()
                    .ok_or("a trailing `\\` escapes nothing")?;
                items.extend(literal(escaped));
                rest = &rest[1 + escaped.len_utf8()..];
            }
            other => {
                items.extend(literal(other));
                rest = &rest[other.len_utf8()..];
            }
        }
    }
    Ok(items)
}

/// Parses a class after its `[`; returns it and the text after its `]`.
fn parse_class(text: &str) -> Result<(Item, &str), String> {
    let (negated, mut rest) = match text.strip_prefix('^') {
        Some(after) => (true, after),
        None => (false, text),
    };
    let mut ranges = Vec::new();
    loop {
        if !ranges.is_empty()
            && let Some(after) = rest.strip_prefix(']')
        {
            return Ok((Item::Class { negated, ranges }, after));
        }
        let (low, after_low) = class_member(rest)?;
        rest = after_low;
        let mut high = low;
        if let Some(after_dash) = rest.strip_prefix('-') {
            let (end, after_high) = class_member(after_dash)?;
            high = end;
            rest = after_high;
        }
        ranges.push((low, high));
    }
}

/// Reads one (possibly escaped) class member; the class must go on after it.
fn class_member(text: &str) -> Result<(char, &str), String> {
    let mut chars = text.chars();
    let member = match chars.next() {
        None => return Err("unclosed `[`".to_owned()),
        Some(']') => {
            return Err(
                "a class member is missing before `]` (`[]` is empty; write `\\]` for a literal `]`)"
                    .to_owned(),
            );
        }
        Some('-') => {
            return Err(
                "a `-` in a class must be escaped as `\\-` unless it joins a range".to_owned(),
            );
        }
        Some('\\') => chars.next().ok_or_else(|| "unclosed `[`".to_owned())?,
        Some(other) => other,
    };
    let rest = chars.as_str();
    if rest.is_empty() {
        return Err("unclosed `[`".to_owned());
    }
    Ok((member, rest))
}

/// Returns the items matching a literal character byte by byte.
fn literal(character: char) -> impl Iterator<Item = Item> {
    let mut buffer = [0_u8; 4];
    let bytes: Vec<u8> = character.encode_utf8(&mut buffer).bytes().collect();
    bytes.into_iter().map(Item::Byte)
}

/// Decodes one character at the start of `bytes` like Go's `utf8.DecodeRune`: an invalid or
/// cut-off sequence reads as U+FFFD, one byte wide. `bytes` must not be empty.
fn decode(bytes: &[u8]) -> (char, usize) {
    let width = match bytes[0] {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return (char::REPLACEMENT_CHARACTER, 1),
    };
    bytes
        .get(..width)
        .and_then(|sequence| std::str::from_utf8(sequence).ok())
        .and_then(|text| text.chars().next())
        .map_or((char::REPLACEMENT_CHARACTER, 1), |character| {
            (character, width)
        })
}
