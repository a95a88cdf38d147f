//! `keel client --jsonl`: a JSON Lines bridge so that a parent process (a scheduler, a script
//! in another language) drives a kernel over stdio. Each stdin line is one command (`create`,
//! `get`, `cancel`, `signal`, `watch`; see [`request`]); each answer, event and error is one
//! stdout line carrying the command's `ref`. Commands run concurrently — a `watch` streams
//! while later lines are served — and a bad line only produces an error line. At the end of
//! stdin the bridge finishes the commands in flight (watches until their execution ends) and
//! exits 0.

mod request;
#[cfg(test)]
mod tests;

use std::time::Duration;

use clap::Args;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use std::io::Write as _;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use self::request::{Command, Line, Request, call_error_line, error_line, line, next_line};
use super::client::{CliError, Client, path_segment};
use super::output::is_terminal_event;
use crate::config::ClientConfig;

/// Longest command line accepted.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// Answer lines waiting for stdout before commands pause.
const OUTPUT_BUFFER: usize = 1024;
/// Consecutive failed reconnects after which a watch gives up.
const MAX_RECONNECTS: u32 = 5;
/// Pause between reconnects of a watch.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// Flags of `keel client`.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Read commands as JSON lines on stdin, write answers and events as JSON lines on stdout
    /// (the only mode today).
    #[arg(long, required = true)]
    pub jsonl: bool,
    /// Kernel connection flags.
    #[command(flatten)]
    pub client: ClientConfig,
}

/// Serves stdin until it ends, then waits for the commands in flight.
pub async fn run(args: ClientArgs) -> Result<(), CliError> {
    if args.client.output != crate::config::OutputFormat::Json {
        return Err(CliError::InvalidArgument {
            what: "--output",
            message: "keel client --jsonl writes JSON lines only; drop --output text".to_owned(),
        });
    }
    let client = Client::new(&args.client)?;
    let (sender, receiver) = mpsc::channel::<Value>(OUTPUT_BUFFER);
    let writer = std::thread::spawn(move || write_lines(receiver));
    let (lines_tx, mut lines) = mpsc::channel::<Line>(1);
    std::thread::spawn(move || read_lines(&lines_tx));
    let mut commands = JoinSet::new();
    while let Some(next) = lines.recv().await {
        // Reap finished commands as we go so the set stays small.
        while commands.try_join_next().is_some() {}
        let text = match next {
            Line::TooLong => {
                let message = format!("line longer than {MAX_LINE} bytes");
                let _ = sender
                    .send(error_line(None, None, "LINE_TOO_LONG", &message, None))
                    .await;
                continue;
            }
            Line::Text(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        };
        if text.trim().is_empty() {
            continue;
        }
        let request = request::parse(text.trim());
        let Request {
            reference,
            op,
            command,
        } = request;
        match command {
            Ok(command) => {
                commands.spawn(serve(client.clone(), reference, command, sender.clone()));
            }
            Err(error) => {
                let line = error_line(
                    reference.as_ref(),
                    op.as_deref(),
                    error.code,
                    &error.message,
                    None,
                );
                let _ = sender.send(line).await;
            }
        }
    }
    while commands.join_next().await.is_some() {}
    drop(sender);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

/// Reads stdin (on a thread of its own: reading a pipe blocks) and hands over its lines.
fn read_lines(lines: &mpsc::Sender<Line>) {
    let mut stdin = std::io::stdin().lock();
    loop {
        match next_line(&mut stdin, MAX_LINE) {
            Ok(Some(line)) => {
                if lines.blocking_send(line).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot read stdin");
                return;
            }
        }
    }
}

/// Writes answer lines to stdout, flushing each; a closed stdout ends the process quietly.
fn write_lines(mut receiver: mpsc::Receiver<Value>) {
    let mut stdout = std::io::stdout().lock();
    while let Some(value) = receiver.blocking_recv() {
        let mut bytes = value.to_string().into_bytes();
        bytes.push(b'\n');
        let written = stdout.write_all(&bytes).and_then(|()| stdout.flush());
        if let Err(error) = written {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            tracing::warn!(%error, "cannot write to stdout");
        }
    }
}

/// Runs one command and sends its lines.
async fn serve(
    client: Client,
    reference: Option<Value>,
    command: Command,
    out: mpsc::Sender<Value>,
) {
    let op = command.op();
    let reference = reference.as_ref();
    let answer = |field: &str, value: Value| {
        let mut line = line(reference, Some(op));
        line.insert("ok".to_owned(), Value::Bool(true));
        line.insert(field.to_owned(), value);
        Value::Object(line)
    };
    let result = match command {
        Command::Create {
            agent_id,
            input,
            labels,
        } => {
            let mut body = Map::new();
            body.insert("agent_id".to_owned(), Value::String(agent_id));
            if let Some(input) = input {
                body.insert("input".to_owned(), input);
            }
            if let Some(labels) = labels {
                body.insert("labels".to_owned(), labels);
            }
            let created = client
                .post("/v0/executions", Some(&Value::Object(body)))
                .await;
            created.map(|execution| answer("execution", execution))
        }
        Command::Get { id } => {
            let path = format!("/v0/executions/{}", path_segment(&id));
            client
                .get(&path, &[])
                .await
                .map(|execution| answer("execution", execution))
        }
        Command::Cancel { id } => {
            let path = format!("/v0/executions/{}/cancel", path_segment(&id));
            client
                .post(&path, None)
                .await
                .map(|execution| answer("execution", execution))
        }
        Command::Signal {
            id,
            signal_type,
            payload,
        } => {
            let mut body = json!({ "signal_type": signal_type });
            if let Some(payload) = payload {
                body["payload"] = payload;
            }
            let path = format!("/v0/executions/{}/signal", path_segment(&id));
            client
                .post(&path, Some(&body))
                .await
                .map(|result| answer("result", result))
        }
        Command::Watch { id, after } => {
            watch(&client, reference, &id, after.unwrap_or(0), &out).await
        }
    };
    let line = result.unwrap_or_else(|error| call_error_line(reference, op, &error));
    let _ = out.send(line).await;
}

/// Streams an execution's events as `{"event": …}` lines; the final line says how it ended.
async fn watch(
    client: &Client,
    reference: Option<&Value>,
    id: &str,
    after: i64,
    out: &mpsc::Sender<Value>,
) -> Result<Value, CliError> {
    let path = format!("/v0/executions/{}/stream", path_segment(id));
    let mut cursor = after;
    let mut failures = 0;
    loop {
        match follow(client, reference, id, &path, &mut cursor, out).await {
            Ok(Some(status)) => {
                let mut done = line(reference, Some("watch"));
                done.insert("ok".to_owned(), Value::Bool(true));
                done.insert("id".to_owned(), Value::String(id.to_owned()));
                done.insert("done".to_owned(), Value::Bool(true));
                done.insert("status".to_owned(), Value::String(status));
                return Ok(Value::Object(done));
            }
            Ok(None) => failures = 0,
            Err(error @ CliError::Api { .. }) => return Err(error),
            Err(error) => {
                failures += 1;
                if failures > MAX_RECONNECTS {
                    return Err(error);
                }
            }
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Reads one stream connection; the final status once a terminal event was sent, `None` when
/// the stream ended without one.
async fn follow(
    client: &Client,
    reference: Option<&Value>,
    id: &str,
    path: &str,
    cursor: &mut i64,
    out: &mpsc::Sender<Value>,
) -> Result<Option<String>, CliError> {
    let response = client
        .stream(path, &[("after_sequence", cursor.to_string())])
        .await?;
    let mut events = response.bytes_stream().eventsource();
    while let Some(message) = events.next().await {
        let message = message.map_err(|error| CliError::Connect {
            url: client.base_url().to_owned(),
            message: error.to_string(),
        })?;
        let Ok(event) = serde_json::from_str::<Value>(&message.data) else {
            continue;
        };
        let sequence = event
            .get("sequence")
            .and_then(Value::as_i64)
            .unwrap_or_default();
        if sequence <= *cursor {
            continue;
        }
        *cursor = sequence;
        let mut line = line(reference, Some("watch"));
        line.insert("id".to_owned(), Value::String(id.to_owned()));
        line.insert("event".to_owned(), event);
        let _ = out.send(Value::Object(line)).await;
        if is_terminal_event(&message.event) {
            let status = message.event.trim_start_matches("execution.").to_owned();
            return Ok(Some(status));
        }
    }
    Ok(None)
}
