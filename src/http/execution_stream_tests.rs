use super::*;

/// A log whose terminal commit lands right after the stream's events read, before its
/// status read: the first read sees nothing, the status is already terminal.
struct RacingLog {
    completed: Vec<Event>,
    status_read: std::sync::atomic::AtomicBool,
}

impl ExecutionLog for RacingLog {
    async fn events_after(
        &self,
        _: &ExecutionId,
        after: i64,
        _: i64,
    ) -> Result<Batch<Event>, KernelError> {
        let committed = self.status_read.load(std::sync::atomic::Ordering::SeqCst);
        let items = if committed {
            self.completed
                .iter()
                .filter(|event| event.sequence > after)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Ok(Batch { items, full: false })
    }

    async fn has_ended(&self, _: &ExecutionId) -> Result<bool, KernelError> {
        self.status_read
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(true)
    }
}

#[tokio::test]
async fn a_terminal_event_committed_between_the_two_reads_is_still_sent() {
    use keel_actors::events::{EventBody, NewEvent, seal};
    let id = ExecutionId::new("e1");
    let body = EventBody::ExecutionCompleted {
        output: serde_json::json!("done"),
    };
    let completed = seal(
        &id,
        4,
        keel_actors::time::now(),
        None,
        vec![NewEvent::execution(body)],
    );
    let log = RacingLog {
        completed,
        status_read: Default::default(),
    };
    let page = read_after(&log, &id, 4, 1 << 20)
        .await
        .expect("the stream goes on");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].body.type_name(), "execution.completed");
    // Once it was sent, the next read ends the stream.
    assert!(read_after(&log, &id, 5, 1 << 20).await.is_none());
}
