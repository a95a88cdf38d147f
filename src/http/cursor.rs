//! The opaque page cursor of `GET /v0/executions` (WIRE.md §7.2): standard base64 of
//! `<created_at RFC 3339 micros>|<id>` of the last row of a page.

use keel_actors::time::{self, Timestamp};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Returns the cursor that continues after the row `(created_at, id)`.
pub fn encode(created_at: &Timestamp, id: &str) -> String {
    base64_encode(format!("{}|{}", time::format(created_at), id).as_bytes())
}

/// Returns the `(created_at, id)` key a cursor continues after, or `None` when it is malformed.
pub fn decode(cursor: &str) -> Option<(Timestamp, String)> {
    let bytes = base64_decode(cursor)?;
    let text = String::from_utf8(bytes).ok()?;
    let (created_at, id) = text.split_once('|')?;
    if id.is_empty() {
        return None;
    }
    let created_at = chrono::DateTime::parse_from_rfc3339(created_at)
        .ok()?
        .with_timezone(&chrono::Utc);
    Some((created_at, id.to_owned()))
}

fn base64_encode(input: &[u8]) -> String {
    let mut output = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let bytes = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let group = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for index in 0..4 {
            if index <= chunk.len() {
                let sextet = (group >> (18 - 6 * index)) & 0x3f;
                output.push(char::from(ALPHABET[sextet as usize]));
            } else {
                output.push('=');
            }
        }
    }
    output
}

fn base64_decode(input: &str) -> Option<Vec<u8>> {
    let bytes = input.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut output = Vec::with_capacity(bytes.len() / 4 * 3);
    let groups = bytes.len() / 4;
    for (group_index, group) in bytes.chunks(4).enumerate() {
        let padding = group.iter().rev().take_while(|&&byte| byte == b'=').count();
        if padding > 2 || (padding > 0 && group_index + 1 != groups) {
            return None;
        }
        let mut value: u32 = 0;
        for &byte in &group[..4 - padding] {
            let sextet = ALPHABET.iter().position(|&symbol| symbol == byte)?;
            value = (value << 6) | sextet as u32;
        }
        value <<= 6 * padding as u32;
        let decoded = [(value >> 16) as u8, (value >> 8) as u8, value as u8];
        output.extend_from_slice(&decoded[..3 - padding]);
    }
    Some(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
        for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            if !text.is_empty() {
                assert_eq!(
                    base64_decode(&base64_encode(text.as_bytes())).as_deref(),
                    Some(text.as_bytes())
                );
            }
        }
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_rejected() {
        let now = time::now();
        let cursor = encode(&now, "0196-abc");
        assert_eq!(decode(&cursor), Some((now, "0196-abc".to_owned())));
        for bad in [
            "",
            "!!!!",
            "Zg=",
            "Zm9v",
            &base64_encode(b"2020-01-01T00:00:00Z|"),
            &base64_encode(b"nope|id"),
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
