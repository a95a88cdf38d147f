//! The progress line of long bench phases: every two seconds, on stderr, how many of the
//! phase's items are done and the rate over the last interval. A phase shorter than the
//! interval prints nothing.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// Interval between progress lines.
const INTERVAL: Duration = Duration::from_secs(2);

/// Prints progress until dropped.
pub struct Progress {
    task: JoinHandle<()>,
}

impl Progress {
    /// Starts printing `keel bench <phase>: done[/total] …` for the counter `done`.
    pub fn start(
        phase: String,
        total: Option<u64>,
        done: impl Fn() -> u64 + Send + 'static,
    ) -> Self {
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut last = (started, done());
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + INTERVAL, INTERVAL);
            loop {
                ticks.tick().await;
                let now = Instant::now();
                let count = done();
                eprintln!("{}", line(&phase, count, total, last, now, started));
                last = (now, count);
            }
        });
        Self { task }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Formats one progress line.
fn line(
    phase: &str,
    count: u64,
    total: Option<u64>,
    last: (Instant, u64),
    now: Instant,
    started: Instant,
) -> String {
    let interval = now.duration_since(last.0).as_secs_f64();
    let rate = if interval > 0.0 {
        count.saturating_sub(last.1) as f64 / interval
    } else {
        0.0
    };
    let of = total.map(|total| format!("/{total}")).unwrap_or_default();
    format!(
        "keel bench {phase}: {count}{of} after {:.0} s, {rate:.1}/s",
        now.duration_since(started).as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_done_total_and_the_recent_rate() {
        let started = Instant::now();
        let last = (started + Duration::from_secs(2), 100);
        let now = started + Duration::from_secs(4);
        assert_eq!(
            line("blocked: create", 500, Some(1000), last, now, started),
            "keel bench blocked: create: 500/1000 after 4 s, 200.0/s"
        );
        assert_eq!(
            line("run", 7, None, (now, 7), now, started),
            "keel bench run: 7 after 4 s, 0.0/s"
        );
    }
}
