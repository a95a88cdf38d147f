use std::collections::BTreeMap;

use super::{Cursor, PendingQueue};
use crate::guardrails::concurrency::{LabelSet, Labels};
use crate::ids::ExecutionId;

fn id(name: &str) -> ExecutionId {
    ExecutionId::new(name)
}

fn drain(queue: &mut PendingQueue) -> Vec<String> {
    std::iter::from_fn(|| queue.pop())
        .map(|id| id.to_string())
        .collect()
}

#[test]
fn higher_priority_first_then_arrival_order() {
    let mut queue = PendingQueue::default();
    queue.push(id("a"), 0, None);
    queue.push(id("b"), 5, None);
    queue.push(id("c"), 0, None);
    queue.push(id("d"), -3, None);
    queue.push(id("e"), 5, None);
    assert_eq!(drain(&mut queue), ["b", "e", "a", "c", "d"]);
}

#[test]
fn duplicates_are_ignored_while_known() {
    let mut queue = PendingQueue::default();
    assert!(queue.push(id("a"), 0, None));
    assert!(
        !queue.push(id("a"), 9, None),
        "a second push does not move it"
    );
    assert_eq!(queue.pop(), Some(id("a")));
    assert!(
        !queue.push(id("a"), 0, None),
        "being offered still counts as known"
    );
    assert_eq!(queue.waiting(), 0);
    assert_eq!(queue.len(), 1);
    queue.forget(&id("a"));
    assert!(queue.is_empty());
    assert!(
        queue.push(id("a"), 0, None),
        "pending again after it was forgotten"
    );
}

#[test]
fn a_failed_offer_goes_back_to_its_place() {
    let mut queue = PendingQueue::default();
    queue.push(id("a"), 1, None);
    queue.push(id("b"), 1, None);
    queue.push(id("c"), 0, None);
    let first = queue.pop().expect("a");
    queue.push(id("d"), 1, None);
    queue.put_back(first);
    assert_eq!(drain(&mut queue), ["a", "b", "d", "c"]);
}

#[test]
fn forget_removes_a_waiting_execution() {
    let mut queue = PendingQueue::default();
    queue.push(id("a"), 0, None);
    queue.push(id("b"), 0, None);
    queue.forget(&id("a"));
    assert!(!queue.contains(&id("a")));
    queue.put_back(id("a"));
    assert_eq!(drain(&mut queue), ["b"]);
}

fn tenant(value: &str) -> Labels {
    Some(LabelSet::from(BTreeMap::from([(
        "tenant".to_owned(),
        value.to_owned(),
    )])))
}

#[test]
fn pop_admitted_skips_refused_executions_which_keep_their_places() {
    let mut queue = PendingQueue::default();
    queue.push(id("a1"), 0, tenant("acme"));
    queue.push(id("b1"), 0, tenant("bolt"));
    queue.push(id("a2"), 0, tenant("acme"));
    queue.push(id("n1"), 0, None);
    let not_acme = |labels: &Labels| labels != &tenant("acme");
    let mut cursor = Cursor::default();
    let first = queue.pop_admitted(&mut cursor, not_acme);
    assert_eq!(first, Some((id("b1"), tenant("bolt"))));
    assert_eq!(
        queue.pop_admitted(&mut cursor, not_acme),
        Some((id("n1"), None))
    );
    assert_eq!(queue.pop_admitted(&mut cursor, not_acme), None);
    // The cursor passed `a1` and `a2`: a later pass starts at the head again.
    assert_eq!(
        queue.pop_admitted(&mut Cursor::default(), |_| true),
        Some((id("a1"), tenant("acme")))
    );
    assert_eq!(queue.waiting_ids(), [id("a2")]);
    assert_eq!(
        queue.labels(&id("a1")),
        tenant("acme"),
        "known until forgotten"
    );
}
