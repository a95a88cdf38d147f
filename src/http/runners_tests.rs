//! Unit tests of the runner routes' request checks.

use super::*;

fn request(value: Value) -> ResultRequest {
    serde_json::from_value(value).unwrap()
}

#[test]
fn results_need_ids_and_valid_times() {
    let error = validate_result(&request(json!({"job_id": "j", "step_id": "s"}))).unwrap_err();
    assert_eq!(
        error.to_string(),
        "validation error: job_id, execution_id, and step_id are required"
    );
    let error = validate_result(&request(
        json!({"job_id": "j", "execution_id": "e", "step_id": "s", "started_at": "yesterday"}),
    ))
    .unwrap_err();
    assert!(matches!(error, ApiError::BadRequest(_)));
    let outcome = validate_result(&request(json!({
        "job_id": "j", "execution_id": "e", "step_id": "s", "success": true, "data": {"x": 1},
        "completed_at": "2026-01-01T00:00:00.5+02:00"
    })))
    .unwrap();
    assert!(outcome.success && !outcome.retryable);
    assert_eq!(outcome.data, Some(json!({"x": 1})));
}
