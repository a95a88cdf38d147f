//! Failed authentication, per client address: a fixed window of [`WINDOW`] with at most
//! [`LIMIT`] failures answered 401 and logged; past that the address's failing requests are
//! answered 429 with `Retry-After` and logged once per window (with the count it suppressed).
//! Only failures count, so a valid key from the same address is never slowed down. Loopback
//! addresses (a local proxy, the tests) are never answered 429, only their log lines are
//! limited.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Length of a window.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Failures an address may have per window before it is throttled.
pub const LIMIT: u32 = 20;
/// Addresses tracked at most (oldest windows are dropped past it).
const MAX_ADDRESSES: usize = 10_000;

/// What to do with one failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Answer 401 and log it.
    Log,
    /// Answer 401 (a loopback address past the limit); `log` when this is the first of the
    /// window past the limit.
    Quiet {
        /// Whether to log (once per window).
        log: bool,
    },
    /// Answer 429 after `retry_after` seconds; `log` when this is the first of the window.
    Throttle {
        /// Seconds until the window ends.
        retry_after: u64,
        /// Whether to log (once per window).
        log: bool,
    },
}

#[derive(Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

/// The failure counters.
#[derive(Default)]
pub struct Failures {
    windows: Mutex<HashMap<IpAddr, Window>>,
}

impl Failures {
    /// Counts one failure of `address` at `now`.
    pub fn record(&self, address: IpAddr, now: Instant) -> Verdict {
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if windows.len() >= MAX_ADDRESSES {
            windows.retain(|_, window| now.duration_since(window.started) < WINDOW);
        }
        let window = windows.entry(address).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
        if window.failures <= LIMIT {
            return Verdict::Log;
        }
        let log = window.failures == LIMIT + 1;
        if address.is_loopback() {
            return Verdict::Quiet { log };
        }
        let left = WINDOW.saturating_sub(now.duration_since(window.started));
        Verdict::Throttle {
            retry_after: left.as_secs().max(1),
            log,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_throttled_past_the_limit_and_others_are_not() {
        let failures = Failures::default();
        let start = Instant::now();
        let noisy: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        for _ in 0..LIMIT {
            assert_eq!(failures.record(noisy, start), Verdict::Log);
        }
        assert!(matches!(
            failures.record(noisy, start),
            Verdict::Throttle { log: true, .. }
        ));
        assert!(matches!(
            failures.record(noisy, start),
            Verdict::Throttle { log: false, .. }
        ));
        assert_eq!(failures.record(other, start), Verdict::Log);
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..LIMIT {
            failures.record(local, start);
        }
        assert_eq!(failures.record(local, start), Verdict::Quiet { log: true });
        assert_eq!(failures.record(local, start), Verdict::Quiet { log: false });
        assert_eq!(failures.record(noisy, start + WINDOW), Verdict::Log);
    }
}
