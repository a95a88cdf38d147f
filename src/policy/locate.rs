//! Finds where a field of a policy file is. yaml_serde has no spanned values, but it stamps
//! the position of the node being read onto any error raised while reading it. So to find the
//! line of `rules[3].when.schedule` we walk the document with a seed that skips everything off
//! the path and fails on purpose at the target: the error carries the target's line. The same
//! walk can deserialize the node at a path, which gives exact positions for problems inside one
//! rule without stopping at the first bad rule. Only used on the error path, so walking the
//! document once per problem costs nothing in normal loads.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};

use keel_actors::policy::rules::{FieldPath, PathSegment};

/// Message of the deliberate error raised at the target node.
const TARGET_REACHED: &str = "keel-policy-locate-target";

/// Returns the 1-based line of the node at `path`, or of its nearest ancestor that exists.
pub fn line_of(source: &str, path: &FieldPath) -> Option<usize> {
    let mut segments = path.0.as_slice();
    loop {
        let walk = At::<Target> {
            path: segments,
            target: PhantomData,
        };
        if let Err(error) = walk.deserialize(yaml_serde::Deserializer::from_str(source))
            && let Some(location) = error.location()
        {
            return Some(location.line());
        }
        let (_, parent) = segments.split_last()?;
        segments = parent;
    }
}

/// Deserializes the node at `path` as `T`; `Ok(None)` when the path does not exist. Errors
/// carry the exact position inside the node.
pub fn deserialize_at<T: DeserializeOwned>(
    source: &str,
    path: &FieldPath,
) -> Result<Option<T>, yaml_serde::Error> {
    At::<T> {
        path: &path.0,
        target: PhantomData,
    }
    .deserialize(yaml_serde::Deserializer::from_str(source))
}

/// Removes the ` at line L column C` parts yaml_serde appends to messages (the report puts
/// the line in front instead).
pub fn strip_positions(message: &str) -> String {
    let mut result = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(" at line ") {
        result.push_str(&rest[..start]);
        let after = &rest[start + " at line ".len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let column = after[digits..].strip_prefix(" column ");
        match column {
            Some(column_text) if digits > 0 => {
                let column_digits = column_text.bytes().take_while(u8::is_ascii_digit).count();
                rest = &column_text[column_digits..];
            }
            _ => {
                result.push_str(" at line ");
                rest = after;
            }
        }
    }
    result.push_str(rest);
    result
}

/// A node type that fails as soon as it is read, to learn its position.
struct Target;

impl<'de> de::Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TargetVisitor)
    }
}

/// Visitor of [`Target`]: every `visit_*` falls back to serde's default, which is an error;
/// `visit_map` and `visit_seq` are overridden only to say why.
struct TargetVisitor;

impl<'de> Visitor<'de> for TargetVisitor {
    type Value = Target;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(TARGET_REACHED)
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Target, A::Error> {
        Err(de::Error::custom(TARGET_REACHED))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Target, A::Error> {
        Err(de::Error::custom(TARGET_REACHED))
    }
}

/// Walks to `path`, skipping everything else, then reads the node there as `T`.
struct At<'p, T> {
    path: &'p [PathSegment],
    target: PhantomData<T>,
}

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for At<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        match self.path.split_first() {
            None => T::deserialize(deserializer).map(Some),
            Some((segment, rest)) => deserializer.deserialize_any(Step {
                segment,
                rest,
                target: PhantomData,
            }),
        }
    }
}

/// Visitor taking one step of a path.
struct Step<'p, T> {
    segment: &'p PathSegment,
    rest: &'p [PathSegment],
    target: PhantomData<T>,
}

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for Step<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<KeyText>()? {
            let wanted = matches!(self.segment, PathSegment::Key(name) if key.0.as_deref() == Some(name.as_str()));
            if wanted && found.is_none() {
                found = map.next_value_seed(At {
                    path: self.rest,
                    target: PhantomData,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        let mut index = 0;
        loop {
            if matches!(self.segment, PathSegment::Index(wanted) if *wanted == index) {
                match seq.next_element_seed(At {
                    path: self.rest,
                    target: PhantomData,
                })? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            index += 1;
        }
        Ok(found)
    }

    fn visit_bool<E: de::Error>(self, _value: bool) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _value: i64) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _value: u64) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _value: f64) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _value: &str) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
}

/// A mapping key as text when it is a scalar (`None` for complex keys).
struct KeyText(Option<String>);

impl<'de> de::Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyVisitor)
    }
}

/// Visitor of [`KeyText`].
struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = KeyText;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<KeyText, E> {
        Ok(KeyText(Some(value.to_owned())))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<KeyText, E> {
        Ok(KeyText(Some(value.to_string())))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<KeyText, E> {
        Ok(KeyText(Some(value.to_string())))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<KeyText, E> {
        Ok(KeyText(Some(value.to_string())))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<KeyText, E> {
        Ok(KeyText(Some(value.to_string())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
        Ok(KeyText(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyText, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(KeyText(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyText, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(KeyText(None))
    }
}
