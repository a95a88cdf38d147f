use super::PendingQueue;
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
    queue.push(id("a"), 0);
    queue.push(id("b"), 5);
    queue.push(id("c"), 0);
    queue.push(id("d"), -3);
    queue.push(id("e"), 5);
    assert_eq!(drain(&mut queue), ["b", "e", "a", "c", "d"]);
}

#[test]
fn duplicates_are_ignored_while_known() {
    let mut queue = PendingQueue::default();
    assert!(queue.push(id("a"), 0));
    assert!(!queue.push(id("a"), 9), "a second push does not move it");
    assert_eq!(queue.pop(), Some(id("a")));
    assert!(
        !queue.push(id("a"), 0),
        "being offered still counts as known"
    );
    assert_eq!(queue.waiting(), 0);
    assert_eq!(queue.len(), 1);
    queue.forget(&id("a"));
    assert!(queue.is_empty());
    assert!(
        queue.push(id("a"), 0),
        "pending again after it was forgotten"
    );
}

#[test]
fn a_failed_offer_goes_back_to_its_place() {
    let mut queue = PendingQueue::default();
    queue.push(id("a"), 1);
    queue.push(id("b"), 1);
    queue.push(id("c"), 0);
    let first = queue.pop().expect("a");
    queue.push(id("d"), 1);
    queue.put_back(first);
    assert_eq!(drain(&mut queue), ["a", "b", "d", "c"]);
}

#[test]
fn forget_removes_a_waiting_execution() {
    let mut queue = PendingQueue::default();
    queue.push(id("a"), 0);
    queue.push(id("b"), 0);
    queue.forget(&id("a"));
    assert!(!queue.contains(&id("a")));
    queue.put_back(id("a"));
    assert_eq!(drain(&mut queue), ["b"]);
}
