use serde_json::{Value, json};

use super::protocol::{Ending, Job, Outcome, job_line, outcome, parse_job, parse_result};

fn job() -> Job {
    parse_job(
        r#"{"id":"j1","execution_id":"e1","step_id":"s1","attempt":2,"tool_id":"t",
            "tool_version":0,"arguments":{"a":1},"deadline":"2030-01-01T00:00:00Z",
            "not_before":"0001-01-01T00:00:00Z"}"#,
    )
    .expect("a job.assigned parses")
}

fn exited(code: i32) -> Ending {
    Ending::Exited {
        status: format!("exit status {code}"),
        ok: code == 0,
    }
}

#[test]
fn job_assigned_parses_and_becomes_one_stdin_line() {
    let job = job();
    assert_eq!(job.attempt, 2);
    let line = job_line(&job);
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(line.iter().filter(|byte| **byte == b'\n').count(), 1);
    let parsed: Value = serde_json::from_slice(&line).expect("JSON");
    assert_eq!(
        parsed,
        json!({"job_id": "j1", "execution_id": "e1", "step_id": "s1", "tool_id": "t",
               "arguments": {"a": 1}, "attempt": 2, "deadline": "2030-01-01T00:00:00Z"})
    );
}

#[test]
fn job_assigned_without_ids_is_rejected_and_defaults_fill_the_rest() {
    assert!(parse_job(r#"{"execution_id":"e","step_id":"s","tool_id":"t"}"#).is_err());
    assert!(parse_job(r#"{"id":"","execution_id":"e","step_id":"s","tool_id":"t"}"#).is_err());
    assert!(parse_job("not json").is_err());
    let minimal =
        parse_job(r#"{"id":"j","execution_id":"e","step_id":"s","tool_id":"t"}"#).expect("parses");
    assert_eq!(minimal.attempt, 1);
    assert_eq!(minimal.arguments, Value::Null);
    assert_eq!(minimal.deadline, None);
}

#[test]
fn result_line_needs_exactly_one_object_with_success() {
    let ok = parse_result(b"\n{\"success\":true,\"data\":[1]}\n\n").expect("one line");
    assert!(ok.success);
    assert_eq!(ok.data, Some(json!([1])));
    assert!(parse_result(b"").is_err());
    assert!(parse_result(b"{\"success\":true}\n{\"success\":true}\n").is_err());
    assert!(parse_result(b"{\"data\":1}\n").is_err());
    assert!(parse_result(b"{\"success\":\"yes\"}\n").is_err());
    assert!(parse_result(b"{\"success\":true,\"sucess\":true}\n").is_err());
    assert!(parse_result(b"[true]\n").is_err());
    assert!(parse_result(b"\xff\xfe\n").is_err());
}

#[test]
fn a_result_line_decides_whatever_the_exit_status() {
    let line = br#"{"success":false,"error":"quota","retryable":true,"cost":{"usd":0.5}}"#;
    let outcome = outcome(&exited(1), line, "ignored", false);
    assert_eq!(
        outcome,
        Outcome {
            success: false,
            data: None,
            error: Some("quota".to_owned()),
            retryable: true,
            cost: Some(json!({"usd": 0.5})),
        }
    );
    let success = super::protocol::outcome(
        &exited(0),
        br#"{"success":true,"data":7,"retryable":true}"#,
        "",
        true,
    );
    assert!(success.success);
    assert!(!success.retryable, "a success is never retryable");
    assert_eq!(success.data, Some(json!(7)));
    let silent =
        super::protocol::outcome(&exited(0), br#"{"success":false,"error":"  "}"#, "", false);
    assert_eq!(silent.error.as_deref(), Some(super::protocol::NO_MESSAGE));
}

#[test]
fn worker_failures_name_the_cause_and_follow_the_retry_flag() {
    let no_line = outcome(&exited(3), b"", "boom\n", false);
    assert_eq!(
        no_line.error.as_deref(),
        Some("worker ended with exit status 3 without a result line; stderr: boom")
    );
    assert!(!no_line.retryable);
    let clean_exit = outcome(&exited(0), b"  \n", "", true);
    assert_eq!(
        clean_exit.error.as_deref(),
        Some("worker exited without a result line")
    );
    assert!(clean_exit.retryable);
    let garbage = outcome(&exited(0), b"hello\n", "", false);
    let message = garbage.error.expect("a message");
    assert!(
        message.starts_with("worker ended with exit status 0 and an unusable stdout ("),
        "{message}"
    );
    assert!(message.ends_with("): \"hello\""), "{message}");
    let timed_out = outcome(
        &Ending::TimedOut("wall time limit of 1s exceeded".into()),
        b"",
        "",
        true,
    );
    assert_eq!(
        timed_out.error.as_deref(),
        Some("worker killed: wall time limit of 1s exceeded")
    );
    assert!(timed_out.retryable);
    let flood = outcome(&Ending::OutputTooLarge(1024), b"xxxx", "", false);
    assert_eq!(
        flood.error.as_deref(),
        Some("worker killed: output exceeded the limit of 1024 bytes")
    );
    let spawn = outcome(
        &Ending::SpawnFailed("permission denied".into()),
        b"",
        "",
        false,
    );
    assert_eq!(
        spawn.error.as_deref(),
        Some("cannot start the worker: permission denied")
    );
    let stopping = outcome(&Ending::ShuttingDown, b"", "", false);
    assert!(
        stopping.retryable,
        "a job cut short by a runner shutdown goes back to the kernel"
    );
}

#[test]
fn result_body_has_the_ids_and_only_the_fields_set() {
    let job = job();
    let success = Outcome {
        success: true,
        data: Some(json!({"n": 1})),
        error: None,
        retryable: false,
        cost: None,
    };
    assert_eq!(
        success.body(&job, "c-0"),
        json!({"job_id": "j1", "execution_id": "e1", "step_id": "s1", "consumer_id": "c-0",
               "success": true, "data": {"n": 1}})
    );
    let failure = Outcome::failure("no".to_owned(), true);
    assert_eq!(
        failure.body(&job, "c-0"),
        json!({"job_id": "j1", "execution_id": "e1", "step_id": "s1", "consumer_id": "c-0",
               "success": false, "error": "no", "retryable": true})
    );
}

#[test]
fn a_result_line_with_a_cost_the_kernel_cannot_count_is_unusable() {
    for line in [
        &br#"{"success":true,"cost":{"usd":-1}}"#[..],
        br#"{"success":true,"cost":"cheap"}"#,
        br#"{"success":false,"error":"x","cost":{"usd":"0.1"}}"#,
    ] {
        let problem = parse_result(line).expect_err("refused");
        assert!(problem.contains("cost"), "{problem}");
    }
    assert!(parse_result(br#"{"success":true,"cost":{"usd":0.1,"tokens":12}}"#).is_ok());
}

#[test]
fn the_idempotency_key_reaches_the_job_line_when_the_kernel_sends_one() {
    let job = parse_job(
        r#"{"id":"j1","execution_id":"e1","step_id":"s2","tool_id":"t","idempotency_key":"e1:s1"}"#,
    )
    .expect("a job.assigned parses");
    assert_eq!(job.idempotency_key.as_deref(), Some("e1:s1"));
    let parsed: Value = serde_json::from_slice(&job_line(&job)).expect("JSON");
    assert_eq!(parsed["idempotency_key"], json!("e1:s1"));
    assert_eq!(super::protocol::IDEMPOTENCY_KEY_ENV, "KEEL_IDEMPOTENCY_KEY");
}
