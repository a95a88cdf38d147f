//! Text log lines name client-chosen ids (agent, tool, runner, request ids). A line feed or a
//! terminal escape in one must not forge a log line or drive the operator's terminal (issue 38,
//! item 8): every field value of a text log line is written with its control characters
//! escaped (`\n`, `\r`, `\t`, `\u{1b}` …). JSON log lines are escaped by JSON itself.

use std::fmt::{self, Write as _};

use tracing::field::Field;
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// The field formatter of text log lines: `message` bare, the others `name=value`, separated
/// by spaces, control characters escaped.
pub fn fields()
-> impl for<'writer> tracing_subscriber::fmt::FormatFields<'writer> + Send + Sync + 'static {
    debug_fn(write_field).delimited(" ")
}

fn write_field(writer: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    if field.name() != "message" {
        write!(writer, "{}=", field.name())?;
    }
    write!(Escaping(writer), "{value:?}")
}

/// Writes through to a log line, escaping control characters.
struct Escaping<'a, 'writer>(&'a mut Writer<'writer>);

impl fmt::Write for Escaping<'_, '_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for ch in text.chars() {
            match ch {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                ch if ch.is_control() => write!(self.0, "\\u{{{:x}}}", ch as u32)?,
                ch => self.0.write_char(ch)?,
            }
        }
        Ok(())
    }
}
