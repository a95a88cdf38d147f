//! A check that a JSON value has no object with the same key twice, at any depth.
//!
//! `serde_json` keeps the last of two equal keys silently, so `{"agent_id":"a","agent_id":"b"}`
//! would mean whatever the last one says while a proxy or a log that keeps the first sees
//! another request. Request bodies pass through [`UniqueKeys`] first: one pass over the bytes
//! that checks the syntax and the keys and builds nothing (a key is copied only when it has
//! escapes), after which the body is decoded straight into its request type. Building a
//! `serde_json::Value` to check it and then decoding the request from that tree cost two
//! allocations per key and value on every request.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value whose objects have unique keys; remembers only whether it was `null`.
pub struct UniqueKeys {
    /// The value was `null`.
    pub null: bool,
}

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

const SCALAR: UniqueKeys = UniqueKeys { null: false };

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(SCALAR)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(SCALAR)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(SCALAR)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(SCALAR)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(SCALAR)
    }

    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys { null: true })
    }

    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys { null: true })
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<UniqueKeys, D::Error> {
        UniqueKeys::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(SCALAR)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = Seen::default();
        while let Some(Key(key)) = map.next_key()? {
            map.next_value::<UniqueKeys>()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
        }
        Ok(SCALAR)
    }
}

/// The keys of one object so far: scanned while there are few, hashed beyond
/// [`Seen::SCANNED`] so that a hostile object with many keys costs linear time.
#[derive(Default)]
struct Seen<'de> {
    few: Vec<Cow<'de, str>>,
    many: HashSet<Cow<'de, str>>,
}

impl<'de> Seen<'de> {
    const SCANNED: usize = 16;

    /// Adds `key`; returns `false` when the object already had it.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        if !self.many.is_empty() {
            return self.many.insert(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        self.few.push(key);
        if self.few.len() > Self::SCANNED {
            self.many.extend(self.few.drain(..));
        }
        true
    }
}

/// An object key, borrowed from the body unless it had escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(key)))
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key.to_owned())))
    }

    fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(key)))
    }
}
