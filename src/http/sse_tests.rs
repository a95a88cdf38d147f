use super::*;

#[test]
fn frames_carry_id_event_and_one_data_line_per_line() {
    assert_eq!(
        &frame(Some(3), "step.created", "{\"a\":1}")[..],
        b"id: 3\nevent: step.created\ndata: {\"a\":1}\n\n"
    );
    assert_eq!(
        &frame(None, "tool.result", "a\nb")[..],
        b"event: tool.result\ndata: a\ndata: b\n\n"
    );
}

#[test]
fn json_is_framed_compact_on_one_data_line_as_frame_would() {
    let data = serde_json::json!({
        "execution_id": "e-1",
        "arguments": {"text": "two\nlines", "quote": "say \"hi\"", "emoji": "\u{1F600}"},
        "list": [1, 2.5, null, true],
    });
    for id in [None, Some(7)] {
        let framed = json_frame(id, "execution.assigned", &data);
        assert_eq!(framed, frame(id, "execution.assigned", &data.to_string()));
        let text = std::str::from_utf8(&framed).expect("utf-8");
        let lines: Vec<&str> = text.lines().skip(usize::from(id.is_some())).collect();
        assert_eq!(lines.len(), 3, "event, data, blank line: {text:?}");
        assert_eq!(lines[2], "");
        assert_eq!(lines[0], "event: execution.assigned");
        let json = lines[1].strip_prefix("data: ").expect("a data line");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(json).expect("json"),
            data
        );
    }
}

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
