//! What a model call used, read from the provider's answer: token counts from an OpenAI
//! `usage` object (a whole answer's, or the last chunk's of a stream), the cost from the
//! configured prices, and the server-sent events of a stream split one by one so that each is
//! forwarded as soon as it is complete.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::Format;

/// Tokens a call used, as the provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input: Option<u64>,
    /// Completion tokens.
    pub output: Option<u64>,
    /// Prompt tokens served from the provider's cache.
    pub cached: Option<u64>,
}

impl Usage {
    /// Reads an OpenAI `usage` object (`prompt_tokens`, `completion_tokens`,
    /// `prompt_tokens_details.cached_tokens`); `None` when `value` has none.
    pub fn from_openai(value: &Value) -> Option<Self> {
        let usage = value.get("usage").filter(|usage| usage.is_object())?;
        Some(Self {
            input: usage.get("prompt_tokens").and_then(Value::as_u64),
            output: usage.get("completion_tokens").and_then(Value::as_u64),
            cached: usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64),
        })
    }

    /// Reads the usage of a whole answer in `format`.
    pub fn from_answer(format: Format, value: &Value) -> Option<Self> {
        match format {
            Format::Openai => Self::from_openai(value),
            Format::Anthropic => value.get("usage").and_then(Self::from_anthropic),
        }
    }

    /// Reads the usage one stream event carries in `format` (OpenAI: the last chunk's;
    /// Anthropic: `message_start`'s `message.usage` and `message_delta`'s `usage`).
    pub fn from_stream_event(format: Format, value: &Value) -> Option<Self> {
        match format {
            Format::Openai => Self::from_openai(value),
            Format::Anthropic => value
                .pointer("/message/usage")
                .or_else(|| value.get("usage"))
                .and_then(Self::from_anthropic),
        }
    }

    /// Reads an Anthropic `usage` object: its input counts exclude cache reads and writes, which
    /// are added (cache reads are also the `cached` count).
    fn from_anthropic(usage: &Value) -> Option<Self> {
        if !usage.is_object() {
            return None;
        }
        let count = |name: &str| usage.get(name).and_then(Value::as_u64);
        let read = count("cache_read_input_tokens");
        let written = count("cache_creation_input_tokens");
        Some(Self {
            input: count("input_tokens")
                .map(|input| input + read.unwrap_or(0) + written.unwrap_or(0)),
            output: count("output_tokens"),
            cached: read,
        })
    }

    /// Takes every count `newer` knows (a stream reports usage in more than one event).
    pub fn merge(&mut self, newer: Self) {
        self.input = newer.input.or(self.input);
        self.output = newer.output.or(self.output);
        self.cached = newer.cached.or(self.cached);
    }

    /// Input plus output tokens, when either is known.
    pub fn total(&self) -> Option<u64> {
        match (self.input, self.output) {
            (None, None) => None,
            (input, output) => Some(input.unwrap_or(0) + output.unwrap_or(0)),
        }
    }
}

/// Prices of one model in US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million completion tokens.
    pub output: f64,
    /// Per million cached prompt tokens (the input price when absent).
    #[serde(default)]
    pub cached_input: Option<f64>,
}

impl Price {
    /// The dollars `usage` cost at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let input = usage.input.unwrap_or(0);
        let cached = usage.cached.unwrap_or(0).min(input);
        let uncached = input - cached;
        let per_token = |tokens: u64, per_million: f64| tokens as f64 * per_million / 1_000_000.0;
        per_token(uncached, self.input)
            + per_token(cached, self.cached_input.unwrap_or(self.input))
            + per_token(usage.output.unwrap_or(0), self.output)
    }
}

/// The cost units a call is charged in: `tokens` (input + output) and, when the model has a
/// price, `usd`. `None` when the provider reported no usage.
pub fn cost(usage: Option<&Usage>, price: Option<&Price>) -> Option<BTreeMap<String, f64>> {
    let usage = usage?;
    let tokens = usage.total()?;
    let mut units = BTreeMap::new();
    units.insert("tokens".to_owned(), tokens as f64);
    if let Some(price) = price {
        units.insert("usd".to_owned(), price.cost(usage));
    }
    Some(units)
}

/// Splits a byte stream of server-sent events into whole events (each with its blank-line
/// terminator), keeping the incomplete tail for the next chunk.
#[derive(Debug, Default)]
pub struct EventSplitter {
    buffer: Vec<u8>,
}

impl EventSplitter {
    /// Adds `chunk` and returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = event_end(&self.buffer) {
            let rest = self.buffer.split_off(end);
            events.push(std::mem::replace(&mut self.buffer, rest));
        }
        events
    }

    /// What is left once the stream ended (an event without its terminator), if anything.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.buffer.is_empty()).then(|| std::mem::take(&mut self.buffer))
    }
}

/// The index just past the first event terminator (`\n\n`, `\r\n\r\n` or `\r\r`) in `bytes`.
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut index = 0;
    while index + 1 < bytes.len() {
        match (bytes[index], bytes[index + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some(index + 2),
            (b'\r', b'\n') if bytes.get(index + 2..index + 4) == Some(b"\r\n") => {
                return Some(index + 4);
            }
            _ => index += 1,
        }
    }
    None
}

/// The JSON of an event's `data:` lines (joined), when it is JSON (`[DONE]` is not).
pub fn event_json(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.strip_prefix(' ').unwrap_or(data))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

/// Whether a stream chunk carries only usage (`choices` empty): the chunk the gateway asked
/// for on the caller's behalf, dropped when the caller did not ask for it.
pub fn usage_only(chunk: &Value) -> bool {
    chunk
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
        && Usage::from_openai(chunk).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_and_cost_follow_the_answer_and_the_price() {
        let answer = json!({"usage": {"prompt_tokens": 1000, "completion_tokens": 200,
            "prompt_tokens_details": {"cached_tokens": 400}}});
        let usage = Usage::from_openai(&answer).expect("usage");
        assert_eq!(
            usage,
            Usage {
                input: Some(1000),
                output: Some(200),
                cached: Some(400)
            }
        );
        let price = Price {
            input: 2.0,
            output: 8.0,
            cached_input: Some(0.5),
        };
        // 600 uncached at $2/M + 400 cached at $0.5/M + 200 out at $8/M
        let expected = 600.0 * 2.0 / 1e6 + 400.0 * 0.5 / 1e6 + 200.0 * 8.0 / 1e6;
        let units = cost(Some(&usage), Some(&price)).expect("cost");
        assert_eq!(units["tokens"], 1200.0);
        assert!((units["usd"] - expected).abs() < 1e-12, "{units:?}");
        assert_eq!(
            cost(Some(&usage), None).map(|units| units.len()),
            Some(1),
            "no price, tokens only"
        );
        assert_eq!(Usage::from_openai(&json!({"usage": null})), None);
        assert_eq!(cost(None, Some(&price)), None);
    }

    #[test]
    fn anthropic_usage_adds_cache_reads_and_writes_and_streams_merge() {
        let answer = json!({"usage": {"input_tokens": 10, "output_tokens": 5,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}});
        assert_eq!(
            Usage::from_answer(Format::Anthropic, &answer),
            Some(Usage {
                input: Some(130),
                output: Some(5),
                cached: Some(100)
            })
        );
        let start = json!({"type": "message_start",
            "message": {"usage": {"input_tokens": 12, "output_tokens": 1}}});
        let delta = json!({"type": "message_delta", "usage": {"output_tokens": 40}});
        let mut usage = Usage::from_stream_event(Format::Anthropic, &start).expect("start");
        usage.merge(Usage::from_stream_event(Format::Anthropic, &delta).expect("delta"));
        assert_eq!((usage.input, usage.output), (Some(12), Some(40)));
    }

    #[test]
    fn events_are_split_whole_across_chunk_boundaries() {
        let mut splitter = EventSplitter::default();
        assert!(splitter.push(b"data: {\"a\":").is_empty());
        let events = splitter.push(b"1}\n\ndata: [DONE]\r\n\r\ndata: x");
        assert_eq!(
            events,
            vec![
                b"data: {\"a\":1}\n\n".to_vec(),
                b"data: [DONE]\r\n\r\n".to_vec()
            ]
        );
        assert_eq!(event_json(&events[0]), Some(json!({"a": 1})));
        assert_eq!(event_json(&events[1]), None);
        assert_eq!(splitter.finish(), Some(b"data: x".to_vec()));
        assert!(usage_only(
            &json!({"choices": [], "usage": {"prompt_tokens": 1}})
        ));
        assert!(!usage_only(
            &json!({"choices": [{"delta": {}}], "usage": {"prompt_tokens": 1}})
        ));
    }
}
