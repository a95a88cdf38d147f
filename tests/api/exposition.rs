//! A parser of the Prometheus text exposition for the tests: each sample's name, labels
//! (escapes undone) and value, so a test asserts on whole label sets rather than substrings.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of an exposition (comments and blank lines skipped). Panics on a malformed
/// line: the kernel's exposition must parse.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("malformed sample: {line:?}")))
        .collect()
}

/// The value of the sample `name` whose labels are exactly `labels`, if exposed.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    samples(text)
        .into_iter()
        .find(|sample| sample.name == name && sample.labels == wanted)
        .map(|sample| sample.value)
}

/// The samples named `name`.
pub fn family(text: &str, name: &str) -> Vec<Sample> {
    samples(text)
        .into_iter()
        .filter(|sample| sample.name == name)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut body) = rest.strip_prefix('{') {
        loop {
            body = body.strip_prefix(',').unwrap_or(body);
            if let Some(after) = body.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = body.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (index, '"') => break index + 1,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    (_, other) => value.push(other),
                }
            };
            labels.insert(key.to_owned(), value);
            body = &after[end..];
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}
