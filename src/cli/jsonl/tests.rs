use reqwest::StatusCode;
use serde_json::json;

use super::request::{Command, Line, call_error_line, error_line, next_line, parse};
use crate::cli::CliError;

#[test]
fn parses_each_op_and_keeps_the_ref() {
    let request =
        parse(r#"{"op":"create","ref":7,"agent_id":"a","input":{"x":1},"labels":{"k":"v"}}"#);
    assert_eq!(request.reference, Some(json!(7)));
    assert_eq!(request.op.as_deref(), Some("create"));
    assert_eq!(
        request.command,
        Ok(Command::Create {
            agent_id: "a".to_owned(),
            input: Some(json!({"x": 1})),
            labels: Some(json!({"k": "v"})),
        })
    );
    assert_eq!(
        parse(r#"{"op":"signal","id":"e","signal_type":"go"}"#).command,
        Ok(Command::Signal {
            id: "e".to_owned(),
            signal_type: "go".to_owned(),
            payload: None
        })
    );
    assert_eq!(
        parse(r#"{"op":"watch","id":"e","after":3,"ref":{"any":"json"}}"#).command,
        Ok(Command::Watch {
            id: "e".to_owned(),
            after: Some(3)
        })
    );
    assert_eq!(
        parse(r#"{"op":"cancel","id":"e"}"#).command,
        Ok(Command::Cancel { id: "e".to_owned() })
    );
    assert_eq!(
        parse(r#"{"op":"get","id":"e"}"#).command,
        Ok(Command::Get { id: "e".to_owned() })
    );
}

#[test]
fn bad_lines_become_coded_errors() {
    let code = |text: &str| parse(text).command.map_err(|error| error.code);
    assert_eq!(code("not json"), Err("INVALID_JSON"));
    assert_eq!(code("[1,2]"), Err("INVALID_COMMAND"));
    assert_eq!(code(r#"{"id":"e"}"#), Err("INVALID_COMMAND"));
    assert_eq!(code(r#"{"op":5}"#), Err("INVALID_COMMAND"));
    assert_eq!(code(r#"{"op":"explode"}"#), Err("UNKNOWN_OP"));
    assert_eq!(code(r#"{"op":"cancel"}"#), Err("INVALID_COMMAND"));
    assert_eq!(code(r#"{"op":"cancel","id":""}"#), Err("INVALID_COMMAND"));
    assert_eq!(
        code(r#"{"op":"cancel","id":"e","extra":1}"#),
        Err("INVALID_COMMAND")
    );
    assert_eq!(
        code(r#"{"op":"signal","id":"e","signal_type":""}"#),
        Err("INVALID_COMMAND")
    );
    assert_eq!(
        code(r#"{"op":"watch","id":"e","after":"x"}"#),
        Err("INVALID_COMMAND")
    );
    // The ref survives a bad command so the caller can match the error.
    let request = parse(r#"{"op":"explode","ref":"r1"}"#);
    assert_eq!(request.reference, Some(json!("r1")));
    assert_eq!(request.op.as_deref(), Some("explode"));
}

#[test]
fn error_lines_carry_ref_op_code_and_status() {
    let reference = json!("r1");
    assert_eq!(
        error_line(
            Some(&reference),
            Some("get"),
            "NOT_FOUND",
            "gone",
            Some(404)
        ),
        json!({"ref": "r1", "op": "get", "ok": false,
               "error": {"code": "NOT_FOUND", "message": "gone", "status": 404}})
    );
    assert_eq!(
        error_line(None, None, "INVALID_JSON", "bad", None),
        json!({"ok": false, "error": {"code": "INVALID_JSON", "message": "bad"}})
    );
    let api = CliError::Api {
        status: StatusCode::CONFLICT,
        code: "CONFLICT".to_owned(),
        message: "execution is terminal".to_owned(),
    };
    assert_eq!(
        call_error_line(None, "cancel", &api),
        json!({"op": "cancel", "ok": false,
               "error": {"code": "CONFLICT", "message": "execution is terminal", "status": 409}})
    );
    let down = CliError::Connect {
        url: "http://127.0.0.1:1".to_owned(),
        message: "refused".to_owned(),
    };
    assert_eq!(
        call_error_line(None, "get", &down)["error"]["code"],
        "UNAVAILABLE"
    );
}

#[test]
fn reads_lines_and_skips_the_ones_over_the_limit() {
    let input = b"short\r\n0123456789abc\nok\nlast-without-newline".as_slice();
    let mut reader = std::io::BufReader::with_capacity(4, input);
    let mut lines = Vec::new();
    while let Some(line) = next_line(&mut reader, 10).expect("read") {
        lines.push(line);
    }
    assert_eq!(
        lines,
        vec![
            Line::Text(b"short\r".to_vec()),
            Line::TooLong,
            Line::Text(b"ok".to_vec()),
            Line::TooLong,
        ]
    );
    let mut empty = std::io::BufReader::new(b"".as_slice());
    assert_eq!(next_line(&mut empty, 10).expect("read"), None);
    let mut exact = std::io::BufReader::new(b"0123456789\n\n".as_slice());
    assert_eq!(
        next_line(&mut exact, 10).expect("read"),
        Some(Line::Text(b"0123456789".to_vec()))
    );
    assert_eq!(
        next_line(&mut exact, 10).expect("read"),
        Some(Line::Text(Vec::new()))
    );
    assert_eq!(next_line(&mut exact, 10).expect("read"), None);
}
