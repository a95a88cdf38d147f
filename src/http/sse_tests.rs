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
