//! Rendering of kernel answers for the client commands: aligned text for people, JSON for
//! scripts (`--output json`: the kernel's own documents, events one per line).

use std::fmt::Write as _;

use serde_json::Value;

/// Longest payload printed on an event line in text mode.
const PAYLOAD_PREVIEW_CHARS: usize = 160;

/// Longest error printed in a row of the executions table.
const ERROR_PREVIEW_CHARS: usize = 60;

/// Returns `text` cut to `max` characters, with `…` when cut.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    } else {
        text.to_owned()
    }
}

/// Returns a JSON document pretty-printed.
pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// Returns a string field of a JSON object, or `""`.
fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or("")
}

/// Formats labels as `k=v,k2=v2`.
fn labels(value: &Value) -> String {
    match value.get("labels").and_then(Value::as_object) {
        Some(map) => map
            .iter()
            .map(|(key, label)| {
                format!(
                    "{key}={}",
                    label
                        .as_str()
                        .map_or_else(|| label.to_string(), str::to_owned)
                )
            })
            .collect::<Vec<_>>()
            .join(","),
        None => String::new(),
    }
}

/// Renders execution summaries as an aligned table with a header.
pub fn executions_table(executions: &[Value]) -> String {
    let header = ["ID", "STATUS", "AGENT", "CREATED", "LABELS", "ERROR"];
    let rows: Vec<[String; 6]> = executions
        .iter()
        .map(|execution| {
            [
                text(execution, "id").to_owned(),
                text(execution, "status").to_owned(),
                text(execution, "agent_id").to_owned(),
                text(execution, "created_at").to_owned(),
                labels(execution),
                shortened(text(execution, "error"), ERROR_PREVIEW_CHARS),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 6]| {
        let mut rendered = String::new();
        for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if index + 1 == cells.len() {
                rendered.push_str(cell);
            } else {
                let _ = write!(rendered, "{cell:<width$}  ");
            }
        }
        out.push_str(rendered.trim_end());
        out.push('\n');
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
    }
    if rows.is_empty() {
        out.push_str("(no executions)\n");
    }
    out
}

/// Renders one execution as `field: value` lines.
pub fn execution_details(execution: &Value) -> String {
    let mut out = String::new();
    for (name, field) in [
        ("id", "id"),
        ("status", "status"),
        ("error", "error"),
        ("agent", "agent_id"),
        ("created", "created_at"),
        ("updated", "updated_at"),
    ] {
        if field == "error" && execution.get(field).is_none() {
            continue;
        }
        let _ = writeln!(out, "{name:<8} {}", text(execution, field));
    }
    let _ = writeln!(out, "{:<8} {}", "labels", labels(execution));
    for field in ["input", "output"] {
        if let Some(value) = execution.get(field) {
            let _ = writeln!(out, "{field:<8} {value}");
        }
    }
    out
}

/// Renders one event as a single line: sequence, time, type, step, payload preview.
pub fn event_line(event: &Value) -> String {
    let sequence = event
        .get("sequence")
        .and_then(Value::as_i64)
        .unwrap_or_default();
    let payload = event
        .get("payload")
        .map(Value::to_string)
        .unwrap_or_default();
    let preview = shortened(&payload, PAYLOAD_PREVIEW_CHARS);
    let step = text(event, "step_id");
    let step_column = if step.is_empty() {
        String::new()
    } else {
        format!("step={step} ")
    };
    format!(
        "{sequence:>5}  {}  {:<24} {step_column}{preview}",
        text(event, "timestamp"),
        text(event, "type")
    )
}

/// Returns whether an event type ends an execution.
pub fn is_terminal_event(event_type: &str) -> bool {
    matches!(
        event_type,
        "execution.completed" | "execution.failed" | "execution.cancelled"
    )
}

/// Writes `text` to stdout (a newline is added when missing). When stdout is closed (`keel
/// executions | head`), the process ends quietly with status 0, as with the default SIGPIPE
/// behaviour, instead of panicking like `println!`.
pub fn emit(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_all(text.as_bytes()).and_then(|()| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            stdout.write_all(b"\n")
        }
    });
    match written.and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            tracing::warn!(error = %error, "cannot write to stdout");
        }
    }
}
