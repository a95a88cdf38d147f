//! Model calls in flight hold a reservation against their execution's spending limits
//! (docs/llm.md, "Budgets"): what a call is estimated to spend is counted before it goes to the
//! provider and released when its `llm.called` is recorded with what it really spent. Calls run
//! side by side while the budget left covers all their estimates; near the edge a call waits
//! for the ones in flight to settle, and only a call alone in flight may cross a limit. So an
//! execution overshoots a limit by at most one call (when estimates hold).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::budget::{Budget, BudgetUsage};

/// A reservation nobody settled is dropped after this long (its caller's answer cannot take
/// longer than the gateway's read timeout, so such a reservation was lost).
const STALE_AFTER: Duration = Duration::from_secs(15 * 60);

/// What one model call is estimated to spend: tokens (input + output) and cost per unit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LlmEstimate {
    /// Input plus output tokens.
    pub tokens: u64,
    /// Cost per unit (`tokens`, `usd`, ...).
    pub cost: BTreeMap<String, f64>,
}

/// What a model call may do now, given the reservations of the calls in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Go: the budget left covers this call's estimate on top of those in flight (or nothing
    /// else is in flight).
    Go,
    /// Wait for calls in flight to settle: together they may spend what is left.
    WaitForInFlight,
}

/// The reservations of one execution's model calls in flight (memory only: a restart ends
/// every call in flight anyway).
#[derive(Debug, Default)]
pub struct Reservations {
    next: u64,
    held: BTreeMap<u64, (Instant, LlmEstimate)>,
}

impl Reservations {
    /// Whether a call estimated at `estimate` may go now, with the execution's `usage` (which
    /// is within its limits: the caller checked that first).
    pub fn fit(&mut self, budget: &Budget, usage: &BudgetUsage, estimate: &LlmEstimate) -> Fit {
        self.drop_stale(Instant::now());
        if self.held.is_empty() {
            return Fit::Go;
        }
        let mut projected = usage.clone();
        for reserved in self
            .held
            .values()
            .map(|(_, estimate)| estimate)
            .chain([estimate])
        {
            projected.llm_tokens = projected.llm_tokens.saturating_add(reserved.tokens);
            for (unit, amount) in &reserved.cost {
                *projected.cost.entry(unit.clone()).or_default() += amount;
            }
        }
        if budget.check_cost(&projected).is_none() {
            Fit::Go
        } else {
            Fit::WaitForInFlight
        }
    }

    /// Holds `estimate` for a call that goes now; returns the reservation's id.
    pub fn reserve(&mut self, estimate: LlmEstimate) -> u64 {
        self.next += 1;
        self.held.insert(self.next, (Instant::now(), estimate));
        self.next
    }

    /// Releases a reservation (its call's spend is now recorded, or it never reached the
    /// provider).
    pub fn settle(&mut self, id: u64) {
        self.held.remove(&id);
    }

    /// Calls in flight.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no call is in flight.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    fn drop_stale(&mut self, now: Instant) {
        self.held
            .retain(|_, (since, _)| now.duration_since(*since) < STALE_AFTER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(tokens: u64) -> LlmEstimate {
        LlmEstimate {
            tokens,
            cost: BTreeMap::from([("usd".to_owned(), tokens as f64 / 100.0)]),
        }
    }

    #[test]
    fn calls_go_side_by_side_until_their_estimates_reach_the_limit_then_one_at_a_time() {
        let budget = Budget {
            max_tokens: Some(1000),
            ..Budget::default()
        };
        let usage = BudgetUsage::default();
        let mut reservations = Reservations::default();
        // Alone in flight, a call goes whatever its estimate.
        assert_eq!(reservations.fit(&budget, &usage, &tokens(5000)), Fit::Go);
        let first = reservations.reserve(tokens(400));
        assert_eq!(reservations.fit(&budget, &usage, &tokens(400)), Fit::Go);
        let second = reservations.reserve(tokens(400));
        // 400 + 400 + 400 would reach 1000: the third waits.
        assert_eq!(
            reservations.fit(&budget, &usage, &tokens(400)),
            Fit::WaitForInFlight
        );
        reservations.settle(first);
        assert_eq!(reservations.fit(&budget, &usage, &tokens(400)), Fit::Go);
        reservations.settle(second);
        assert!(reservations.is_empty());
    }

    #[test]
    fn cost_units_are_reserved_too() {
        let budget = Budget {
            max_cost: BTreeMap::from([("usd".to_owned(), 10.0)]),
            ..Budget::default()
        };
        let usage = BudgetUsage {
            cost: BTreeMap::from([("usd".to_owned(), 6.0)]),
            ..BudgetUsage::default()
        };
        let mut reservations = Reservations::default();
        reservations.reserve(tokens(200)); // $2
        assert_eq!(reservations.fit(&budget, &usage, &tokens(100)), Fit::Go);
        assert_eq!(
            reservations.fit(&budget, &usage, &tokens(200)),
            Fit::WaitForInFlight
        );
    }

    #[test]
    fn a_lost_reservation_expires() {
        let mut reservations = Reservations::default();
        reservations.reserve(tokens(1));
        reservations.drop_stale(Instant::now() + STALE_AFTER);
        assert_eq!(reservations.len(), 0);
    }
}
