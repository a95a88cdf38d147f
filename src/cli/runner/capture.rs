//! Bounded buffers for a worker's output: stdout is kept whole up to a limit (more is an
//! error: the worker is killed), stderr keeps only its last bytes for the failure message.

use std::collections::VecDeque;

/// A worker's stdout, kept up to `limit` bytes.
#[derive(Debug)]
pub struct Capped {
    limit: usize,
    bytes: Vec<u8>,
}

/// Stdout grew past its limit.
#[derive(Debug, PartialEq, Eq)]
pub struct Overflow;

impl Capped {
    /// An empty buffer that accepts up to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            bytes: Vec::new(),
        }
    }

    /// Appends a chunk; fails, keeping what fitted, once the total would exceed the limit.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), Overflow> {
        let room = self.limit - self.bytes.len();
        if chunk.len() > room {
            self.bytes.extend_from_slice(&chunk[..room]);
            return Err(Overflow);
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Returns the bytes kept.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// The last `capacity` bytes of a stream.
#[derive(Debug)]
pub struct Tail {
    capacity: usize,
    bytes: VecDeque<u8>,
    dropped: bool,
}

impl Tail {
    /// An empty tail keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
            dropped: false,
        }
    }

    /// Appends a chunk, forgetting the oldest bytes beyond the capacity.
    pub fn push(&mut self, chunk: &[u8]) {
        let keep = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let excess = (self.bytes.len() + keep.len()).saturating_sub(self.capacity);
        if excess > 0 || keep.len() < chunk.len() {
            self.dropped = true;
        }
        self.bytes.drain(..excess);
        self.bytes.extend(keep);
    }

    /// Returns the tail as text (invalid UTF-8 replaced; a cut character at the start
    /// dropped), prefixed with `…` when earlier bytes were forgotten.
    pub fn text(&self) -> String {
        let (front, back) = self.bytes.as_slices();
        let mut bytes = Vec::with_capacity(self.bytes.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        let mut start = 0;
        if self.dropped {
            // Skip UTF-8 continuation bytes of a character whose start was forgotten.
            while start < bytes.len() && start < 3 && (bytes[start] & 0b1100_0000) == 0b1000_0000 {
                start += 1;
            }
        }
        let text = String::from_utf8_lossy(&bytes[start..]);
        if self.dropped {
            format!("…{text}")
        } else {
            text.into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_keeps_everything_up_to_the_limit() {
        let mut out = Capped::new(10);
        assert_eq!(out.push(b"hello"), Ok(()));
        assert_eq!(out.push(b"world"), Ok(()));
        assert_eq!(out.into_bytes(), b"helloworld");
    }

    #[test]
    fn capped_fails_one_byte_over_the_limit() {
        let mut out = Capped::new(10);
        assert_eq!(out.push(b"hello"), Ok(()));
        assert_eq!(out.push(b"world!"), Err(Overflow));
        assert_eq!(out.into_bytes(), b"helloworld");
    }

    #[test]
    fn capped_with_zero_limit_refuses_any_byte() {
        let mut out = Capped::new(0);
        assert_eq!(out.push(b""), Ok(()));
        assert_eq!(out.push(b"x"), Err(Overflow));
    }

    #[test]
    fn tail_keeps_short_streams_whole() {
        let mut tail = Tail::new(16);
        tail.push(b"line one\n");
        tail.push(b"two");
        assert_eq!(tail.text(), "line one\ntwo");
    }

    #[test]
    fn tail_keeps_the_last_bytes_and_marks_the_cut() {
        let mut tail = Tail::new(8);
        tail.push(b"0123456789");
        assert_eq!(tail.text(), "…23456789");
        tail.push(b"ab");
        assert_eq!(tail.text(), "…456789ab");
        let mut chunked = Tail::new(4);
        for byte in b"abcdefgh" {
            chunked.push(&[*byte]);
        }
        assert_eq!(chunked.text(), "…efgh");
    }

    #[test]
    fn tail_drops_a_character_cut_in_half() {
        let mut tail = Tail::new(5);
        // "é" is two bytes; keeping 5 of "aéééé" (9 bytes) starts inside an "é".
        tail.push("aéééé".as_bytes());
        assert_eq!(tail.text(), "…éé");
    }
}
