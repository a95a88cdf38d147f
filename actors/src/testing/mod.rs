//! The actor test harness (feature `testing`), described with a worked example per actor kind
//! in docs/testing.md:
//!
//! - [`Probe`]: stands in for any neighbour, records every message in order, answers RPCs from
//!   a closure or a [`Script`] (or keeps them [`Unanswered`]), with `expect` /
//!   `expect_none_within` under timeouts;
//! - [`MemoryStore`]: an in-memory store with failure injection; [`Clock::tokio`] for a clock
//!   under the test's control (`start_paused`);
//! - [`observe`]: a snapshot of an actor's state on demand;
//! - [`LeakCheck`]: at the end of a test, no actor it started (nor their children) still runs;
//!   [`TestKernel::shutdown`] applies the same check to the whole kernel tree;
//! - [`ProbeContext`]: a context for one actor under test with probes for its neighbours.
//!
//! [`Clock::tokio`]: crate::time::Clock::tokio

mod context;
mod kernel;
mod leak;
mod memory_store;
mod observe;
mod probe;

pub use context::ProbeContext;
pub use kernel::{TestKernel, eventually, sleep_until};
pub use leak::LeakCheck;
pub use memory_store::MemoryStore;
pub use observe::{OBSERVE_TIMEOUT, observe};
pub use probe::{Probe, ProbeHandle, Script, Unanswered};
