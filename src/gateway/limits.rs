//! A provider's shared limits (docs/llm.md, "Provider limits"): requests and tokens per minute
//! for all executions together, parking after a 429 until its `Retry-After`, and a breaker that
//! stops calling a provider that keeps failing. Calls that may not go yet wait, up to
//! `max_wait`, instead of each retrying into the provider on its own.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The window requests and tokens per minute are counted in.
const MINUTE: Duration = Duration::from_secs(60);
/// Parking after a 429 without a usable `Retry-After`.
const DEFAULT_PARK: Duration = Duration::from_secs(1);
/// Longest parking a `Retry-After` may ask for.
const MAX_PARK: Duration = Duration::from_secs(300);

/// A provider's limits as configured.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitSettings {
    /// Requests per minute (all executions), if limited.
    pub rpm: Option<u32>,
    /// Tokens per minute (input + output as reported), if limited.
    pub tpm: Option<u64>,
    /// Longest a call waits for a slot before it is refused.
    pub max_wait: Duration,
    /// Consecutive 5xx answers (or unreachable) that open the breaker; 0 turns it off.
    pub breaker_failures: u32,
    /// How long an open breaker refuses calls.
    pub breaker_cool_down: Duration,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            rpm: None,
            tpm: None,
            max_wait: Duration::from_secs(30),
            breaker_failures: 5,
            breaker_cool_down: Duration::from_secs(30),
        }
    }
}

/// Why a call may not go to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// No slot within `max_wait`; retry after the duration.
    Throttled(Duration),
    /// The breaker is open for the duration.
    Open(Duration),
}

#[derive(Debug, Default)]
struct State {
    parked_until: Option<Instant>,
    requests: VecDeque<Instant>,
    tokens: VecDeque<(Instant, u64)>,
    tokens_in_window: u64,
    failures: u32,
    open_until: Option<Instant>,
}

/// The shared gate of one provider.
#[derive(Debug)]
pub struct Gate {
    settings: LimitSettings,
    state: Mutex<State>,
}

impl Gate {
    /// A gate with `settings`.
    pub fn new(settings: LimitSettings) -> Self {
        Self {
            settings,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for a slot (parking, requests and tokens per minute), at most `max_wait` from
    /// now, and takes it; refuses at once while the breaker is open.
    pub async fn admit(&self) -> Result<(), Held> {
        let deadline = Instant::now() + self.settings.max_wait;
        loop {
            let now = Instant::now();
            let wait = {
                let mut state = self.state();
                if let Some(until) = state.open_until {
                    if until > now {
                        return Err(Held::Open(until - now));
                    }
                    state.open_until = None;
                }
                let free_at = self.free_at(&mut state, now);
                if free_at <= now {
                    if self.settings.rpm.is_some() {
                        state.requests.push_back(now);
                    }
                    return Ok(());
                }
                free_at - now
            };
            let left = deadline.saturating_duration_since(now);
            if wait > left {
                return Err(Held::Throttled(wait));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// The first instant a call may go, dropping what left the window.
    fn free_at(&self, state: &mut State, now: Instant) -> Instant {
        let mut free_at = now;
        if let Some(until) = state.parked_until {
            if until > now {
                free_at = until;
            } else {
                state.parked_until = None;
            }
        }
        while state
            .requests
            .front()
            .is_some_and(|at| now.duration_since(*at) >= MINUTE)
        {
            state.requests.pop_front();
        }
        while let Some((at, count)) = state.tokens.front().copied() {
            if now.duration_since(at) < MINUTE {
                break;
            }
            state.tokens.pop_front();
            state.tokens_in_window = state.tokens_in_window.saturating_sub(count);
        }
        if let Some(rpm) = self.settings.rpm
            && state.requests.len() >= rpm as usize
            && let Some(oldest) = state.requests.front()
        {
            free_at = free_at.max(*oldest + MINUTE);
        }
        if let Some(tpm) = self.settings.tpm
            && state.tokens_in_window >= tpm
        {
            // The window frees when enough of its oldest entries leave it.
            let mut in_window = state.tokens_in_window;
            for (at, count) in &state.tokens {
                in_window = in_window.saturating_sub(*count);
                if in_window < tpm {
                    free_at = free_at.max(*at + MINUTE);
                    break;
                }
            }
        }
        free_at
    }

    /// Counts what a finished call used.
    pub fn used(&self, tokens: u64) {
        if self.settings.tpm.is_some() && tokens > 0 {
            let mut state = self.state();
            state.tokens.push_back((Instant::now(), tokens));
            state.tokens_in_window += tokens;
        }
    }

    /// Takes a provider's answer into account: a 429 parks the provider for its
    /// `Retry-After`; a 5xx or an unreachable provider (`None`) counts toward the breaker;
    /// anything else resets it.
    pub fn answered(&self, status: Option<u16>, retry_after: Option<Duration>) {
        let now = Instant::now();
        let mut state = self.state();
        match status {
            Some(429) => {
                let park = retry_after.unwrap_or(DEFAULT_PARK).min(MAX_PARK);
                let until = now + park;
                state.parked_until = Some(state.parked_until.map_or(until, |at| at.max(until)));
            }
            Some(status) if status < 500 => state.failures = 0,
            _ => {
                state.failures += 1;
                let limit = self.settings.breaker_failures;
                if limit > 0 && state.failures >= limit {
                    state.open_until = Some(now + self.settings.breaker_cool_down);
                    state.failures = 0;
                }
            }
        }
    }

    /// Whether the provider is parked after a 429 now.
    pub fn parked(&self) -> bool {
        self.state()
            .parked_until
            .is_some_and(|until| until > Instant::now())
    }

    /// The longest a call waits for a slot.
    pub fn max_wait(&self) -> Duration {
        self.settings.max_wait
    }
}

/// Reads a `Retry-After` of whole seconds (the form providers send).
pub fn retry_after(value: Option<&str>) -> Option<Duration> {
    value?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(settings: LimitSettings) -> Gate {
        Gate::new(settings)
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_parks_every_caller_until_its_retry_after() {
        let gate = gate(LimitSettings::default());
        gate.admit().await.expect("free");
        gate.answered(Some(429), Some(Duration::from_secs(2)));
        let started = tokio::time::Instant::now();
        gate.admit().await.expect("after the park");
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(!gate.parked());
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_longer_than_max_wait_is_refused_with_when_to_retry() {
        let gate = gate(LimitSettings {
            max_wait: Duration::from_secs(1),
            ..LimitSettings::default()
        });
        gate.answered(Some(429), Some(Duration::from_secs(5)));
        assert!(
            matches!(gate.admit().await, Err(Held::Throttled(wait)) if wait > Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_hold_the_next_call_for_the_window() {
        let gate = gate(LimitSettings {
            rpm: Some(2),
            max_wait: Duration::from_secs(120),
            ..LimitSettings::default()
        });
        gate.admit().await.expect("first");
        gate.admit().await.expect("second");
        let started = tokio::time::Instant::now();
        gate.admit().await.expect("third, a minute later");
        assert!(
            started.elapsed() >= Duration::from_secs(59),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_per_minute_count_what_calls_used() {
        let gate = gate(LimitSettings {
            tpm: Some(100),
            max_wait: Duration::from_secs(1),
            ..LimitSettings::default()
        });
        gate.admit().await.expect("first");
        gate.used(150);
        assert!(matches!(gate.admit().await, Err(Held::Throttled(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_failures_open_the_breaker_and_a_success_resets_the_count() {
        let gate = gate(LimitSettings {
            breaker_failures: 3,
            ..LimitSettings::default()
        });
        gate.answered(Some(500), None);
        gate.answered(Some(502), None);
        gate.answered(Some(200), None);
        gate.answered(None, None);
        gate.answered(Some(503), None);
        gate.admit()
            .await
            .expect("two failures since the success: closed");
        gate.answered(Some(500), None);
        assert!(matches!(gate.admit().await, Err(Held::Open(_))));
        tokio::time::advance(Duration::from_secs(31)).await;
        gate.admit().await.expect("closed after the cool-down");
    }

    #[test]
    fn retry_after_is_whole_seconds() {
        assert_eq!(retry_after(Some(" 7 ")), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(None), None);
    }
}
