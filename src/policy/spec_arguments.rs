//! The YAML shape of `when.arguments`, in its two spellings:
//!
//! - the reference form, a sequence of predicates that each name their `field`
//!   (`- field: command` / `pattern: "^ls"`), with `one_of` a list of strings;
//! - Keel's mapping shorthand, field name → predicate (`command: {pattern: "^ls"}`), whose
//!   `one_of` takes any JSON values.
//!
//! Both reject unknown keys and wrong types, and convert into the same
//! [`ArgumentsDefinition`], which the compiler checks.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use keel_actors::policy::rules::{ArgumentsDefinition, PredicateDefinition};

/// `when.arguments` as written.
#[derive(Debug)]
pub enum ArgumentsSpec {
    /// The reference form.
    Sequence(Vec<FieldPredicateSpec>),
    /// Keel's mapping shorthand, in key order.
    Mapping(Vec<(String, PredicateSpec)>),
}

/// One entry of the sequence form.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a predicate mapping (field, pattern, one_of, min, max, max_length, required)"
)]
pub struct FieldPredicateSpec {
    /// Top-level key of the arguments object (required; checked by the compiler so that a
    /// missing one is reported like the reference kernel reports it).
    #[serde(default)]
    pub field: Option<String>,
    /// Regex a string must match.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Allowed strings; a YAML number or boolean is read as its text, as the reference does.
    #[serde(default)]
    pub one_of: Option<Vec<String>>,
    /// Inclusive numeric lower bound.
    #[serde(default)]
    pub min: Option<f64>,
    /// Inclusive numeric upper bound.
    #[serde(default)]
    pub max: Option<f64>,
    /// Maximum string length in characters.
    #[serde(default)]
    pub max_length: Option<i64>,
    /// Whether the field must be present and not empty.
    #[serde(default)]
    pub required: Option<bool>,
}

/// One value of the mapping form.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a predicate mapping (pattern, one_of, min, max, max_length, required)"
)]
pub struct PredicateSpec {
    /// Regex a string must match.
    #[serde(default)]
    pub pattern: Option<String>,
    /// Allowed values (any JSON).
    #[serde(default)]
    pub one_of: Option<Vec<Value>>,
    /// Inclusive numeric lower bound.
    #[serde(default)]
    pub min: Option<f64>,
    /// Inclusive numeric upper bound.
    #[serde(default)]
    pub max: Option<f64>,
    /// Maximum string length in characters.
    #[serde(default)]
    pub max_length: Option<i64>,
    /// Whether the field must be present and not empty.
    #[serde(default)]
    pub required: Option<bool>,
}

impl<'de> Deserialize<'de> for ArgumentsSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ArgumentsVisitor)
    }
}

/// Tells the two spellings apart by the node's kind.
struct ArgumentsVisitor;

impl<'de> Visitor<'de> for ArgumentsVisitor {
    type Value = ArgumentsSpec;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(
            "a sequence of argument predicates (`- field: ...`) \
             or a mapping of field names to predicates",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ArgumentsSpec, A::Error> {
        let mut predicates = Vec::new();
        while let Some(predicate) = seq.next_element::<FieldPredicateSpec>()? {
            predicates.push(predicate);
        }
        Ok(ArgumentsSpec::Sequence(predicates))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ArgumentsSpec, A::Error> {
        let mut fields = BTreeMap::new();
        while let Some((field, predicate)) = map.next_entry::<String, PredicateSpec>()? {
            if fields.insert(field.clone(), predicate).is_some() {
                return Err(de::Error::custom(format_args!(
                    "field `{field}` is listed twice"
                )));
            }
        }
        Ok(ArgumentsSpec::Mapping(fields.into_iter().collect()))
    }
}

impl From<ArgumentsSpec> for ArgumentsDefinition {
    fn from(spec: ArgumentsSpec) -> Self {
        match spec {
            ArgumentsSpec::Sequence(predicates) => Self::sequence(
                predicates
                    .into_iter()
                    .map(|predicate| PredicateDefinition {
                        field: predicate.field,
                        pattern: predicate.pattern,
                        one_of: predicate
                            .one_of
                            .map(|values| values.into_iter().map(Value::String).collect()),
                        min: predicate.min,
                        max: predicate.max,
                        max_length: predicate.max_length,
                        required: predicate.required,
                    })
                    .collect(),
            ),
            ArgumentsSpec::Mapping(fields) => {
                Self::mapping(fields.into_iter().map(|(field, predicate)| {
                    (
                        field,
                        PredicateDefinition {
                            field: None,
                            pattern: predicate.pattern,
                            one_of: predicate.one_of,
                            min: predicate.min,
                            max: predicate.max,
                            max_length: predicate.max_length,
                            required: predicate.required,
                        },
                    )
                }))
            }
        }
    }
}
