//! Tests of the rate-limit windows: sliding-window counting, shared history across rules,
//! rebuilding from stored calls without double counting, and the policy actor keeping its
//! counters across a kernel restart on the same store.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::engine::{Decision, PolicyDecision, PolicyEngine, PolicyInput, RateLimit};
use super::windows::RateWindows;
use crate::ids::{AgentId, ToolId};
use crate::store::AllowedToolCall;
use crate::time::{self, Timestamp};

fn limit(max: u32, seconds: u64) -> RateLimit {
    RateLimit {
        max,
        window: Duration::from_secs(seconds),
        window_text: format!("{seconds}s"),
    }
}

fn key(agent: &str, tool: &str) -> (AgentId, ToolId) {
    (agent.into(), tool.into())
}

fn call(agent: &str, tool: &str, at: Timestamp) -> AllowedToolCall {
    AllowedToolCall {
        agent_id: agent.into(),
        tool_id: tool.into(),
        at,
    }
}

fn ago(wall: Timestamp, seconds: i64) -> Timestamp {
    wall - chrono::Duration::seconds(seconds)
}

#[test]
fn a_window_admits_max_calls_then_refuses_until_the_oldest_leaves() {
    let start = Instant::now();
    let mut windows = RateWindows::new(start);
    let limit = limit(2, 60);
    assert!(windows.admit(key("a", "t"), &limit, start));
    assert!(windows.admit(key("a", "t"), &limit, start + Duration::from_secs(10)));
    assert!(!windows.admit(key("a", "t"), &limit, start + Duration::from_secs(20)));
    assert!(
        windows.admit(key("b", "t"), &limit, start + Duration::from_secs(20)),
        "per agent"
    );
    assert!(
        windows.admit(key("a", "u"), &limit, start + Duration::from_secs(20)),
        "per tool"
    );
    // The first call leaves the window exactly `window` after it was made.
    assert!(!windows.admit(key("a", "t"), &limit, start + Duration::from_secs(59)));
    assert!(windows.admit(key("a", "t"), &limit, start + Duration::from_secs(60)));
    assert!(!windows.admit(key("a", "t"), &limit, start + Duration::from_secs(69)));
    assert!(windows.admit(key("a", "t"), &limit, start + Duration::from_secs(70)));
}

#[test]
fn refused_calls_do_not_count() {
    let start = Instant::now();
    let mut windows = RateWindows::new(start);
    let limit = limit(1, 10);
    assert!(windows.admit(key("a", "t"), &limit, start));
    for second in 1..10 {
        assert!(!windows.admit(key("a", "t"), &limit, start + Duration::from_secs(second)));
    }
    assert!(windows.admit(key("a", "t"), &limit, start + Duration::from_secs(10)));
    assert_eq!(windows.held(&"a".into(), &"t".into()), 2);
}

#[test]
fn rules_with_different_windows_share_the_pair_history_within_the_horizon() {
    let start = Instant::now();
    let mut windows = RateWindows::new(start);
    assert!(
        windows
            .set_horizon(Some(Duration::from_secs(3600)), start, time::now())
            .is_some()
    );
    let short = limit(5, 1);
    let long = limit(2, 3600);
    for offset in [0, 2] {
        assert!(windows.admit(key("a", "t"), &short, start + Duration::from_secs(offset)));
    }
    // The short rule's window dropped both calls long ago; the long rule still sees them.
    assert!(!windows.admit(key("a", "t"), &long, start + Duration::from_secs(60)));
}

#[test]
fn stored_calls_fill_the_windows_at_startup() {
    let start = Instant::now();
    let wall = time::now();
    let mut windows = RateWindows::new(start);
    let request = windows
        .set_horizon(Some(Duration::from_secs(60)), start, wall)
        .expect("history wanted");
    assert_eq!(request.since, ago(wall, 60));
    let calls = [
        call("a", "t", ago(wall, 50)),
        call("a", "t", ago(wall, 5)),
        call("b", "t", ago(wall, 5)),
    ];
    windows.merge_history(request, &calls, start, wall);
    let limit = limit(2, 60);
    assert!(
        !windows.admit(key("a", "t"), &limit, start),
        "two calls in the last minute"
    );
    assert!(
        windows.admit(key("a", "t"), &limit, start + Duration::from_secs(10)),
        "the 50 s old one left"
    );
    assert!(windows.admit(key("b", "t"), &limit, start));
    assert!(!windows.admit(key("b", "t"), &limit, start));
}

#[test]
fn a_longer_horizon_loads_only_older_calls_and_counts_none_twice() {
    let start = Instant::now();
    let wall = time::now();
    let mut windows = RateWindows::new(start);
    let request = windows
        .set_horizon(Some(Duration::from_secs(60)), start, wall)
        .expect("history wanted");
    windows.merge_history(request, &[], start, wall);
    let minute = limit(10, 60);
    assert!(windows.admit(key("a", "t"), &minute, start));
    assert!(windows.admit(key("a", "t"), &minute, start));
    // A reload brings a one-hour window: the store has the two calls above and an older one.
    let reload = start + Duration::from_secs(1);
    let reload_wall = wall + chrono::Duration::seconds(1);
    let request = windows
        .set_horizon(Some(Duration::from_secs(3600)), reload, reload_wall)
        .expect("older history");
    let stored = [
        call("a", "t", ago(wall, 1800)),
        call("a", "t", wall),
        call("a", "t", wall),
    ];
    windows.merge_history(request, &stored, reload, reload_wall);
    assert_eq!(windows.held(&"a".into(), &"t".into()), 3);
    let hour = limit(3, 3600);
    assert!(!windows.admit(key("a", "t"), &hour, reload));
    // The same horizon again, or a shorter one, needs nothing from the store.
    assert!(
        windows
            .set_horizon(Some(Duration::from_secs(3600)), reload, reload_wall)
            .is_none()
    );
    assert!(
        windows
            .set_horizon(Some(Duration::from_secs(60)), reload, reload_wall)
            .is_none()
    );
    assert!(windows.set_horizon(None, reload, reload_wall).is_none());
}

#[test]
fn a_horizon_that_shrank_and_grew_again_reloads_what_it_dropped() {
    let start = Instant::now();
    let wall = time::now();
    let mut windows = RateWindows::new(start);
    let request = windows
        .set_horizon(Some(Duration::from_secs(3600)), start, wall)
        .expect("history wanted");
    windows.merge_history(request, &[], start, wall);
    assert!(
        windows
            .set_horizon(Some(Duration::from_secs(10)), start, wall)
            .is_none()
    );
    let later = start + Duration::from_secs(100);
    let later_wall = wall + chrono::Duration::seconds(100);
    let request = windows
        .set_horizon(Some(Duration::from_secs(3600)), later, later_wall)
        .expect("history again");
    assert_eq!(request.since, ago(later_wall, 3600));
}

#[test]
fn pairs_older_than_the_horizon_are_swept() {
    let start = Instant::now();
    let mut windows = RateWindows::new(start);
    let limit = limit(u32::MAX, 1);
    assert!(windows.admit(key("old", "t"), &limit, start));
    let later = start + Duration::from_secs(10);
    for _ in 0..2048 {
        assert!(windows.admit(key("new", "t"), &limit, later));
    }
    assert_eq!(windows.held(&"old".into(), &"t".into()), 0);
}

/// Allows `limited` at most twice per `window` seconds (rule `twice-a-minute` for 60 s,
/// `twice-an-hour` for 3600 s) and everything else without a limit.
struct LimitedEngine {
    window: u64,
}

/// The engine of most tests: twice a minute.
const MINUTE: LimitedEngine = LimitedEngine { window: 60 };

impl PolicyEngine for LimitedEngine {
    fn evaluate(&self, input: &PolicyInput) -> PolicyDecision {
        let rule = if self.window == 60 {
            "twice-a-minute"
        } else {
            "twice-an-hour"
        };
        let mut decision = PolicyDecision::plain(Decision::Allow, rule, "allowed");
        if input.tool_id == "limited" {
            decision.rate_limit = Some(limit(2, self.window));
        }
        decision
    }

    fn digest(&self) -> String {
        format!("limited-{}", self.window)
    }

    fn longest_rate_window(&self) -> Option<Duration> {
        Some(Duration::from_secs(self.window))
    }
}

mod kernel {
    use super::*;
    use crate::execution::{Intent, IntentReply};
    use crate::ids::{AgentId, ConsumerId, ExecutionId, SessionId};
    use crate::testing::{MemoryStore, TestKernel};

    async fn running(
        t: &TestKernel,
        consumer: &str,
    ) -> (ExecutionId, SessionId, crate::kernel::PushStream) {
        let mut stream = t
            .kernel
            .connect_agent(AgentId::new("a"), ConsumerId::new(consumer))
            .await
            .expect("connect");
        let row = t
            .kernel
            .create_execution(AgentId::new("a"), json!(null), None)
            .await
            .expect("create");
        let push = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("in time")
            .expect("push");
        assert_eq!(push.event, "execution.assigned");
        let session = SessionId::new(push.data["session_id"].as_str().expect("session id"));
        (row.id, session, stream)
    }

    async fn invoke(
        t: &TestKernel,
        id: &ExecutionId,
        session: &SessionId,
        tool: &str,
    ) -> IntentReply {
        let intent = Intent::InvokeTool {
            tool_id: tool.into(),
            arguments: json!({}),
            idempotency_key: None,
            remote: false,
        };
        t.kernel
            .submit_intent(id, session, intent)
            .await
            .expect("intent answered")
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_counters_survive_a_kernel_restart_on_the_same_store() {
        let store = Arc::new(MemoryStore::default());
        let first = TestKernel::start_with(store, Arc::new(MINUTE), |_| {}).await;
        let (id, session, _stream) = running(&first, "c1").await;
        assert!(invoke(&first, &id, &session, "limited").await.accepted);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(invoke(&first, &id, &session, "free").await.accepted);
        assert!(invoke(&first, &id, &session, "limited").await.accepted);
        // Cancelled, so that the second kernel has nothing to recover and reassign.
        first.kernel.cancel(&id).await.expect("cancel");

        let second = first.restart(Arc::new(MINUTE), |_| {}).await;
        let (id, session, _stream) = running(&second, "c2").await;
        let reply = invoke(&second, &id, &session, "limited").await;
        assert!(
            !reply.accepted,
            "third call within the minute is refused after the restart"
        );
        assert_eq!(
            reply.error.as_deref(),
            Some("rate limit exceeded: max 2 per 60s (rule: twice-a-minute)")
        );
        assert!(invoke(&second, &id, &session, "free").await.accepted);
        // The rebuilt calls keep their times: the first leaves the window 60 s after it was made.
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(invoke(&second, &id, &session, "limited").await.accepted);
        assert!(!invoke(&second, &id, &session, "limited").await.accepted);
        second.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_with_a_longer_window_counts_calls_the_old_window_had_dropped() {
        let t = TestKernel::start_with(Arc::new(MemoryStore::default()), Arc::new(MINUTE), |_| {})
            .await;
        let (id, session, _stream) = running(&t, "c1").await;
        assert!(invoke(&t, &id, &session, "limited").await.accepted);
        assert!(invoke(&t, &id, &session, "limited").await.accepted);
        tokio::time::advance(Duration::from_secs(120)).await;
        // The minute window has forgotten both calls...
        assert!(invoke(&t, &id, &session, "limited").await.accepted);
        // ...an hour-long window reads the older one back from the store: three in the hour.
        t.kernel
            .replace_policy(Arc::new(LimitedEngine { window: 3600 }), Vec::new());
        let reply = invoke(&t, &id, &session, "limited").await;
        assert_eq!(
            reply.error.as_deref(),
            Some("rate limit exceeded: max 2 per 3600s (rule: twice-an-hour)")
        );
        // And back to a minute: only the call of the last minute counts.
        t.kernel.replace_policy(Arc::new(MINUTE), Vec::new());
        assert!(invoke(&t, &id, &session, "limited").await.accepted);
        assert!(!invoke(&t, &id, &session, "limited").await.accepted);
        t.shutdown().await;
    }
}

#[test]
fn a_released_call_no_longer_counts() {
    let start = Instant::now();
    let mut windows = RateWindows::new(start);
    let limit = RateLimit {
        max: 2,
        window: Duration::from_secs(60),
        window_text: "1m".to_owned(),
    };
    let key: (AgentId, ToolId) = ("a".into(), "t".into());
    let first = start + Duration::from_secs(1);
    let second = start + Duration::from_secs(2);
    assert!(windows.admit(key.clone(), &limit, first));
    assert!(windows.admit(key.clone(), &limit, second));
    assert!(!windows.admit(key.clone(), &limit, second));
    windows.release(&key, first);
    assert_eq!(windows.held(&"a".into(), &"t".into()), 1);
    assert!(windows.admit(key.clone(), &limit, start + Duration::from_secs(3)));
    // Releasing what is not held changes nothing.
    windows.release(&key, start + Duration::from_secs(30));
    windows.release(&("b".into(), "t".into()), first);
    assert_eq!(windows.held(&"a".into(), &"t".into()), 2);
}
