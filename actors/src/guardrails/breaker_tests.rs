//! Pure tests of the circuit breaker state machine: opening on failures within the window,
//! denial while open, one probe after the cool-down, closing on its success, re-opening on its
//! failure, and a probe that never reports.

use std::time::Duration;

use super::*;
use crate::policy::rules::Glob;

fn config() -> BreakerConfig {
    BreakerConfig {
        tools: vec![Glob::new("pay.*").expect("glob")],
        scope: BreakerScope::Tool,
        failures: 3,
        failure_rate: None,
        window: Duration::from_secs(60),
        window_text: "1m".into(),
        cool_down: Duration::from_secs(30),
        cool_down_text: "30s".into(),
    }
}

fn at(seconds: i64) -> Timestamp {
    chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc)
        + chrono::Duration::seconds(seconds)
}

#[test]
fn failures_within_the_window_open_the_breaker_and_successes_do_not_reset_it() {
    let config = config();
    let mut breakers = Breakers::default();
    assert_eq!(breakers.record("pay.charge", &config, false, at(0)), None);
    assert_eq!(breakers.record("pay.charge", &config, true, at(1)), None);
    assert_eq!(breakers.record("pay.charge", &config, false, at(2)), None);
    assert_eq!(breakers.admit("pay.charge", &config, at(3)), None);
    let change = breakers.record("pay.charge", &config, false, at(4));
    assert_eq!(
        change,
        Some(BreakerChange::Opened {
            tool_id: "pay.charge".into(),
            failures: 3,
            until: at(34),
            probe: false,
        })
    );
    assert_eq!(
        breakers.admit("pay.charge", &config, at(5)).as_deref(),
        Some(
            "circuit open for tool pay.charge: 3 failures within 1m; next probe after \
             2026-01-01T00:00:34.000000Z"
        )
    );
    assert_eq!(
        breakers.admit("pay.refund", &config, at(5)),
        None,
        "per tool id"
    );
    assert_eq!(breakers.open_count(), 1);
}

#[test]
fn failures_older_than_the_window_do_not_count() {
    let config = config();
    let mut breakers = Breakers::default();
    breakers.record("pay.charge", &config, false, at(0));
    breakers.record("pay.charge", &config, false, at(30));
    // The first failure left the window exactly 60 s after it happened.
    assert_eq!(breakers.record("pay.charge", &config, false, at(60)), None);
    assert!(
        breakers
            .record("pay.charge", &config, false, at(61))
            .is_some()
    );
}

#[test]
fn after_the_cool_down_one_probe_passes_and_its_success_closes_the_breaker() {
    let config = config();
    let mut breakers = Breakers::default();
    for second in 0..3 {
        breakers.record("pay.charge", &config, false, at(second));
    }
    assert!(
        breakers.admit("pay.charge", &config, at(31)).is_some(),
        "cool-down until 32"
    );
    assert_eq!(
        breakers.admit("pay.charge", &config, at(32)),
        None,
        "the probe"
    );
    assert_eq!(
        breakers.admit("pay.charge", &config, at(33)).as_deref(),
        Some("circuit half-open for tool pay.charge: a probe call is running")
    );
    // Results of calls made before the breaker opened are ignored while it is open; in
    // half-open the first result decides.
    assert_eq!(
        breakers.record("pay.charge", &config, true, at(40)),
        Some(BreakerChange::Closed {
            tool_id: "pay.charge".into()
        })
    );
    assert_eq!(breakers.admit("pay.charge", &config, at(41)), None);
    assert_eq!(breakers.open_count(), 0);
    // Closed afresh: it takes `failures` new failures to open again.
    assert_eq!(breakers.record("pay.charge", &config, false, at(42)), None);
    assert_eq!(breakers.record("pay.charge", &config, false, at(43)), None);
}

#[test]
fn a_failed_probe_opens_the_breaker_for_another_cool_down() {
    let config = config();
    let mut breakers = Breakers::default();
    for second in 0..3 {
        breakers.record("pay.charge", &config, false, at(second));
    }
    assert_eq!(
        breakers.record("pay.charge", &config, false, at(10)),
        None,
        "ignored while open"
    );
    assert_eq!(breakers.admit("pay.charge", &config, at(40)), None);
    assert_eq!(
        breakers.record("pay.charge", &config, false, at(45)),
        Some(BreakerChange::Opened {
            tool_id: "pay.charge".into(),
            failures: 1,
            until: at(75),
            probe: true,
        })
    );
    assert!(breakers.admit("pay.charge", &config, at(74)).is_some());
    assert_eq!(breakers.admit("pay.charge", &config, at(75)), None);
}

#[test]
fn a_probe_that_never_reports_gives_way_to_a_new_probe_after_a_cool_down() {
    let config = config();
    let mut breakers = Breakers::default();
    for second in 0..3 {
        breakers.record("pay.charge", &config, false, at(second));
    }
    assert_eq!(breakers.admit("pay.charge", &config, at(40)), None);
    assert!(breakers.admit("pay.charge", &config, at(69)).is_some());
    assert_eq!(breakers.admit("pay.charge", &config, at(70)), None);
}

#[test]
fn the_view_lists_open_breakers_and_closed_ones_with_recent_failures() {
    let config = config();
    let set = BreakerSet(vec![config.clone()]);
    let mut breakers = Breakers::default();
    breakers.record("pay.refund", &config, false, at(0));
    for second in 0..3 {
        breakers.record("pay.charge", &config, false, at(second));
    }
    let view = breakers.view(at(10), &set);
    assert_eq!(view.len(), 2);
    assert_eq!(view[0]["tool_id"], "pay.charge");
    assert_eq!(view[0]["state"], "open");
    assert_eq!(view[0]["until"], "2026-01-01T00:00:32.000000Z");
    assert_eq!(view[1]["tool_id"], "pay.refund");
    assert_eq!(view[1]["state"], "closed");
    assert_eq!(view[1]["recent_failures"], 1);
    // A minute later the closed one has nothing to show, and a sweep forgets it.
    assert_eq!(breakers.view(at(61), &set).len(), 1);
    breakers.sweep(at(61), |tool| {
        set.config(&tool.into()).map(|config| config.window)
    });
    assert_eq!(breakers.breakers.len(), 1);
    assert_eq!(set.horizon(), Some(Duration::from_secs(90)));
}

fn rate_config(rate: f64, min_calls: u32) -> BreakerConfig {
    BreakerConfig {
        failure_rate: Some(FailureRate { rate, min_calls }),
        failures: 0,
        ..config()
    }
}

#[test]
fn in_failure_rate_mode_the_share_of_failures_over_min_calls_opens_the_breaker() {
    let config = rate_config(0.5, 4);
    let mut breakers = Breakers::default();
    // Two failures out of two calls: a 100% rate, but fewer than min_calls results.
    assert_eq!(breakers.record("pay.charge", &config, false, at(0)), None);
    assert_eq!(breakers.record("pay.charge", &config, false, at(1)), None);
    // Four calls, two failed: 50% reaches the rate; only a failure can open it.
    assert_eq!(breakers.record("pay.charge", &config, true, at(2)), None);
    assert_eq!(breakers.record("pay.charge", &config, true, at(3)), None);
    assert_eq!(breakers.admit("pay.charge", &config, at(3)), None);
    let opened = breakers.record("pay.charge", &config, false, at(4));
    assert_eq!(
        opened,
        Some(BreakerChange::Opened {
            tool_id: "pay.charge".into(),
            failures: 3,
            until: at(34),
            probe: false,
        })
    );
    let denied = breakers.admit("pay.charge", &config, at(5));
    assert_eq!(
        denied.as_deref(),
        Some(
            "circuit open for tool pay.charge: failure rate of 50% or more over at least 4 calls \
             within 1m; next probe after 2026-01-01T00:00:34.000000Z"
        )
    );
}

#[test]
fn in_failure_rate_mode_successes_keep_the_rate_low_and_leave_the_window() {
    let config = rate_config(0.5, 4);
    let mut breakers = Breakers::default();
    for second in 0..6 {
        breakers.record("pay.charge", &config, true, at(second));
    }
    // 3 failed of 9: below half.
    for second in 6..9 {
        assert_eq!(
            breakers.record("pay.charge", &config, false, at(second)),
            None
        );
    }
    let set = BreakerSet(vec![config.clone()]);
    let view = breakers.view(at(9), &set);
    assert_eq!(view[0]["recent_calls"], 9);
    assert_eq!(view[0]["failure_rate"], 0.5);
    assert_eq!(view[0]["min_calls"], 4);
    // A minute on, the successes left the window: one more failure makes 4 failed of 4.
    let opened = breakers.record("pay.charge", &config, false, at(65));
    assert!(
        matches!(opened, Some(BreakerChange::Opened { failures: 4, .. })),
        "{opened:?}"
    );
}

#[test]
fn blocks_reports_an_open_breaker_or_a_running_probe_without_changing_it() {
    let config = config();
    let mut breakers = Breakers::default();
    assert!(!breakers.blocks("r1", &config, at(0)));
    for second in 0..3 {
        breakers.record("r1", &config, false, at(second));
    }
    assert!(breakers.blocks("r1", &config, at(31)));
    assert!(!breakers.blocks("r1", &config, at(32)), "cool-down passed");
    assert!(
        !breakers.blocks("r1", &config, at(32)),
        "still no probe taken"
    );
    assert_eq!(breakers.admit("r1", &config, at(32)), None);
    assert!(
        breakers.blocks("r1", &config, at(33)),
        "the probe is running"
    );
}
