//! `keel executions --watch`: lists the executions every `--interval` until interrupted. On a
//! terminal each listing replaces the previous one (like `watch`); otherwise (a pipe, `--output
//! json`) listings follow each other, JSON ones as one document per line.

use std::io::IsTerminal;

use super::args::ListArgs;
use super::client::{CliError, Client};
use super::output;
use crate::config::OutputFormat;

/// Clears the screen and moves the cursor home (ANSI; every terminal emulator speaks it).
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// Redraws the listing until Ctrl-C; a failed listing is shown and retried at the next tick.
pub async fn run(client: &Client, args: &ListArgs) -> Result<(), CliError> {
    let redraw = std::io::stdout().is_terminal() && args.client.output == OutputFormat::Text;
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let listing = super::list_executions(client, args).await;
        let text = match (&listing, args.client.output) {
            (Ok(page), OutputFormat::Json) => serde_json::json!({
                "executions": page.executions,
                "next_cursor": page.next_cursor,
            })
            .to_string(),
            (Ok(page), OutputFormat::Text) => output::executions_table(&page.executions),
            (Err(CliError::InvalidArgument { .. }), _) => return listing.map(|_| ()),
            (Err(error), OutputFormat::Json) => {
                serde_json::json!({ "error": error.to_string() }).to_string()
            }
            (Err(error), OutputFormat::Text) => format!("keel: {error}\n"),
        };
        let header = format!(
            "Every {}: keel executions at {}    {}\n\n",
            crate::config::format_duration(args.interval),
            client.base_url(),
            chrono::Local::now().format("%H:%M:%S")
        );
        match (redraw, args.client.output) {
            (true, _) => output::emit(&format!("{CLEAR_SCREEN}{header}{text}")),
            (false, OutputFormat::Text) => output::emit(&format!("{header}{text}")),
            (false, OutputFormat::Json) => output::emit(&text),
        }
    }
}
