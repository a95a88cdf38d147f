//! `keel breakers`: the circuit breakers of a running kernel (`GET /v0/breakers`).

use serde_json::Value;

use super::CliError;
use super::client::Client;
use super::output;
use crate::config::{ClientConfig, OutputFormat};

/// Prints the breakers that are open, half-open or counting recent failures.
pub async fn run(config: &ClientConfig) -> Result<(), CliError> {
    let client = Client::new(config)?;
    let answer = client.get("/v0/breakers", &[]).await?;
    match config.output {
        OutputFormat::Json => output::emit(&output::pretty(&answer)),
        OutputFormat::Text => {
            let breakers = answer
                .get("breakers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            output::emit(&table(&breakers));
        }
    }
    Ok(())
}

/// Renders breakers as a table: tool (or `runner:<id>`), state, until (open) or recent
/// failures (closed).
pub fn table(breakers: &[Value]) -> String {
    if breakers.is_empty() {
        return "no circuit breaker is open or counting failures".to_owned();
    }
    let text = |entry: &Value, key: &str| match entry.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let rows: Vec<[String; 4]> = breakers
        .iter()
        .map(|entry| {
            let detail = match entry.get("state").and_then(Value::as_str) {
                Some("closed") if entry.get("failure_rate").is_some() => format!(
                    "{} failed of {} calls within {} (opens at rate {}, {} calls)",
                    text(entry, "recent_failures"),
                    text(entry, "recent_calls"),
                    text(entry, "window"),
                    text(entry, "failure_rate"),
                    text(entry, "min_calls")
                ),
                Some("closed") => format!(
                    "{} of {} failures within {}",
                    text(entry, "recent_failures"),
                    text(entry, "failures"),
                    text(entry, "window")
                ),
                Some("half_open") if entry.get("probe_since").is_some() => {
                    format!("probe since {}", text(entry, "probe_since"))
                }
                _ => format!("until {}", text(entry, "until")),
            };
            let subject = match entry.get("runner_id") {
                Some(_) => format!("runner:{}", text(entry, "runner_id")),
                None => text(entry, "tool_id"),
            };
            [
                subject,
                text(entry, "state"),
                detail,
                text(entry, "cool_down"),
            ]
        })
        .collect();
    let header = ["TOOL", "STATE", "DETAIL", "COOL-DOWN"];
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .chain(std::iter::once(header[column].len()))
            .max()
            .unwrap_or(0)
    };
    let widths = [width(0), width(1), width(2)];
    let line = |cells: [&str; 4]| {
        format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )
        .trim_end()
        .to_owned()
    };
    let mut lines = vec![line(header)];
    lines.extend(
        rows.iter()
            .map(|row| line([&row[0], &row[1], &row[2], &row[3]])),
    );
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_table_shows_each_state_with_its_detail() {
        let text = super::table(&[
            json!({"tool_id": "pay.charge", "state": "open", "until": "2026-01-01T00:00:30.000000Z",
                   "failures": 5, "window": "1m", "cool_down": "30s"}),
            json!({"tool_id": "pay.refund", "state": "closed", "recent_failures": 2,
                   "failures": 5, "window": "1m", "cool_down": "30s"}),
        ]);
        assert_eq!(
            text,
            "TOOL        STATE   DETAIL                             COOL-DOWN\n\
             pay.charge  open    until 2026-01-01T00:00:30.000000Z  30s\n\
             pay.refund  closed  2 of 5 failures within 1m          30s"
        );
        assert_eq!(
            super::table(&[]),
            "no circuit breaker is open or counting failures"
        );
    }

    #[test]
    fn rate_mode_and_runner_breakers_show_their_own_detail() {
        let text = super::table(&[
            json!({"tool_id": "llm.chat", "state": "closed", "recent_failures": 3,
                   "recent_calls": 9, "failure_rate": 0.5, "min_calls": 10, "window": "1m",
                   "cool_down": "30s"}),
            json!({"runner_id": "gpu-1", "state": "open", "until": "2026-01-01T00:01:00.000000Z",
                   "failures": 5, "window": "1m", "cool_down": "1m"}),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].starts_with("llm.chat")
                && lines[1].contains("3 failed of 9 calls within 1m (opens at rate 0.5, 10 calls)"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("runner:gpu-1")
                && lines[2].contains("until 2026-01-01T00:01:00.000000Z"),
            "{text}"
        );
    }
}
