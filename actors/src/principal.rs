//! Who causes what: the principal recorded on every event (`Event::principal`).
//!
//! A request's principal travels with the work it asks for: the HTTP layer runs each request
//! inside [`acting_as`], and a call into an execution actor made from within it carries the
//! name along (`ExecutionMsg::ActingAs`), so the events that call commits record it. Work
//! nothing asked for — timers, expiries, recovery, a lost consumer or runner, assignments —
//! records [`SYSTEM`].

use std::future::Future;
use std::sync::Arc;

/// The principal of what the kernel does on its own.
pub const SYSTEM: &str = "system";

tokio::task_local! {
    static CURRENT: Arc<str>;
}

/// [`SYSTEM`], shared.
pub fn system() -> Arc<str> {
    static NAME: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(SYSTEM));
    NAME.clone()
}

/// Runs `work` on behalf of `principal`.
pub async fn acting_as<F: Future>(principal: Arc<str>, work: F) -> F::Output {
    CURRENT.scope(principal, work).await
}

/// The principal the current task acts for, if any.
pub fn current() -> Option<Arc<str>> {
    CURRENT.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_principal_is_seen_only_inside_its_scope() {
        assert_eq!(current(), None);
        let seen = acting_as(Arc::from("alice"), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("alice"));
        assert_eq!(current(), None);
    }
}
