//! Latency histograms of `keel bench` (hdrhistogram, microseconds, 1 µs to 1 h at three
//! significant digits) shared by the bench's tasks, and their percentile summaries.

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Highest latency recorded exactly (anything above is clamped): one hour, in microseconds.
const HIGHEST_MICROS: u64 = 3_600_000_000;

/// A latency histogram shared by the bench's tasks.
pub struct Latency {
    /// `None` only if the histogram could not be built (the bounds are valid constants).
    histogram: Mutex<Option<Histogram<u64>>>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// Returns an empty histogram.
    pub fn new() -> Self {
        Self {
            histogram: Mutex::new(Histogram::new_with_bounds(1, HIGHEST_MICROS, 3).ok()),
        }
    }

    /// Records one sample.
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, HIGHEST_MICROS);
        if let Ok(mut guard) = self.histogram.lock()
            && let Some(histogram) = guard.as_mut()
        {
            let _ = histogram.record(micros);
        }
    }

    /// Forgets every sample (the end of a warm-up).
    pub fn reset(&self) {
        if let Ok(mut guard) = self.histogram.lock()
            && let Some(histogram) = guard.as_mut()
        {
            histogram.reset();
        }
    }

    /// Adds every sample of `other`.
    pub fn merge(&self, other: &Latency) {
        let Ok(other) = other.histogram.lock() else {
            return;
        };
        if let (Ok(mut guard), Some(other)) = (self.histogram.lock(), other.as_ref())
            && let Some(histogram) = guard.as_mut()
        {
            let _ = histogram.add(other);
        }
    }

    /// Returns count and percentiles in milliseconds.
    pub fn summary(&self) -> LatencySummary {
        let Ok(guard) = self.histogram.lock() else {
            return LatencySummary::default();
        };
        let Some(histogram) = guard.as_ref() else {
            return LatencySummary::default();
        };
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let millis = |micros: u64| micros as f64 / 1000.0;
        LatencySummary {
            count: histogram.len(),
            p50: millis(histogram.value_at_quantile(0.50)),
            p90: millis(histogram.value_at_quantile(0.90)),
            p99: millis(histogram.value_at_quantile(0.99)),
            max: millis(histogram.max()),
        }
    }
}

/// Percentiles of one histogram, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl LatencySummary {
    /// Returns the summary as JSON: `count`, `p50_ms`, `p90_ms`, `p99_ms`, `max_ms`.
    pub fn to_json(self) -> Value {
        json!({
            "count": self.count,
            "p50_ms": round3(self.p50),
            "p90_ms": round3(self.p90),
            "p99_ms": round3(self.p99),
            "max_ms": round3(self.max),
        })
    }

    /// Returns the summary as one line of text.
    pub fn to_text(self) -> String {
        if self.count == 0 {
            return "no samples".to_owned();
        }
        format!(
            "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  (n={})",
            self.p50, self.p90, self.p99, self.max, self.count
        )
    }
}

/// Rounds to three decimals (microseconds, for values in milliseconds).
pub fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_one_to_a_hundred_milliseconds() {
        let latency = Latency::new();
        for millis in 1..=100 {
            latency.record(Duration::from_millis(millis));
        }
        let summary = latency.summary();
        assert_eq!(summary.count, 100);
        // Three significant digits: within 0.1 % of the exact rank value.
        assert!((summary.p50 - 50.0).abs() < 0.06, "{summary:?}");
        assert!((summary.p90 - 90.0).abs() < 0.1, "{summary:?}");
        assert!((summary.p99 - 99.0).abs() < 0.1, "{summary:?}");
        assert!((summary.max - 100.0).abs() < 0.1, "{summary:?}");
    }

    #[test]
    fn empty_and_reset_histograms_summarise_to_zero() {
        let latency = Latency::new();
        assert_eq!(latency.summary(), LatencySummary::default());
        latency.record(Duration::from_millis(3));
        latency.reset();
        assert_eq!(latency.summary().count, 0);
        assert_eq!(latency.summary().to_text(), "no samples");
    }

    #[test]
    fn samples_are_clamped_not_dropped() {
        let latency = Latency::new();
        latency.record(Duration::ZERO);
        latency.record(Duration::from_secs(7200));
        let summary = latency.summary();
        assert_eq!(summary.count, 2);
        assert!((summary.max - 3_600_000.0).abs() / 3_600_000.0 < 0.001);
    }

    #[test]
    fn merge_adds_the_samples_of_another_histogram() {
        let (one, two) = (Latency::new(), Latency::new());
        one.record(Duration::from_millis(1));
        two.record(Duration::from_millis(9));
        two.record(Duration::from_millis(10));
        one.merge(&two);
        let summary = one.summary();
        assert_eq!(summary.count, 3);
        assert!((summary.max - 10.0).abs() < 0.01);
        assert_eq!(two.summary().count, 2);
    }

    #[test]
    fn json_keys_are_stable() {
        let json = LatencySummary {
            count: 3,
            p50: 1.23456,
            p90: 2.0,
            p99: 3.0,
            max: 4.0,
        }
        .to_json();
        let mut keys: Vec<&str> = json
            .as_object()
            .map(|object| object.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        assert_eq!(keys, ["count", "max_ms", "p50_ms", "p90_ms", "p99_ms"]);
        assert_eq!(json["p50_ms"], 1.235);
    }
}
