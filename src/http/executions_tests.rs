use super::*;

#[test]
fn list_limits_are_defaulted_and_clamped() {
    let limit = |raw: &str| {
        list_filter(&QueryParams::parse(Some(raw), &["label"]).unwrap())
            .unwrap()
            .limit
    };
    assert_eq!(limit(""), 50);
    assert_eq!(limit("limit=0"), 50);
    assert_eq!(limit("limit=-1"), 50);
    assert_eq!(limit("limit=abc"), 50);
    assert_eq!(limit("limit=7"), 7);
    assert_eq!(limit("limit=500"), 200);
}

#[test]
fn bad_filters_have_the_wire_messages() {
    let error = |raw: &str| {
        list_filter(&QueryParams::parse(Some(raw), &["label"]).unwrap())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error("status=done"),
        r#"validation error: invalid status "done""#
    );
    assert_eq!(
        error("label=nocolon"),
        r#"validation error: invalid label filter "nocolon", expected key=value"#
    );
    assert_eq!(
        error("label=:v"),
        r#"validation error: invalid label filter ":v", expected key=value"#
    );
    assert_eq!(error("cursor=zzz"), "validation error: invalid cursor");
    let filter = list_filter(
        &QueryParams::parse(Some("label=a:b:c&status=running&agent_id=x"), &["label"]).unwrap(),
    )
    .unwrap();
    assert_eq!(filter.labels, vec![("a".to_owned(), "b:c".to_owned())]);
    assert_eq!(filter.status, Some(ExecutionStatus::Running));
}
