//! A rule's `then.approval` terms: loaded into the decision, and every bad value reported by
//! `keel policy check` with its line.

use std::time::Duration;

use serde_json::json;

use keel_actors::approvals::Approvers;
use keel_actors::policy::Decision;

use super::{call, write};
use crate::policy::*;

#[test]
fn approval_terms_reach_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "policy.yaml",
        "rules:
- id: prod
  priority: 1
  when: {tool_id: deploy.prod}
  then:
    decision: require_approval
    approval:
      approvers: {roles: [operator], keys: [lead]}
      expires_in: 30m
      on_expiry: deny
      self_approval: true
",
    );
    let loaded = load_path(&path).expect("loads");
    let decision = loaded.engine.evaluate(&call("a", "deploy.prod", json!({})));
    assert_eq!(decision.decision, Decision::RequireApproval);
    let terms = decision.approval.expect("terms");
    assert_eq!(
        terms.approvers,
        Approvers {
            roles: vec!["operator".to_owned()],
            keys: vec!["lead".to_owned()],
        }
    );
    assert_eq!(terms.expires_after, Some(Duration::from_secs(1800)));
    assert!(terms.self_approval);
    // Other tools: no terms.
    let other = loaded.engine.evaluate(&call("a", "deploy.dev", json!({})));
    assert!(other.approval.is_none());
}

#[test]
fn bad_approval_terms_are_each_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "rules:
- id: r
  priority: 1
  when: {}
  then:
    decision: allow
    approval:
      approvers: {roles: [agent]}
      expires_in: 0s
      on_expiry: escalate
",
    );
    let (report, ok) = check_command(&bad);
    assert!(!ok, "{report}");
    for problem in [
        "then.approval is only for decision: require_approval",
        "\"agent\" does not answer approvals",
        "then.approval.on_expiry: escalate needs then.approval.escalate_to",
        "then.approval.expires_in: bad duration `0s`: must be greater than zero",
    ] {
        assert!(report.contains(problem), "{problem}: {report}");
    }
    assert!(
        report.ends_with("policy invalid: 4 problem(s)\n"),
        "{report}"
    );
    // An unknown key is refused by the YAML shape.
    let unknown = write(
        dir.path(),
        "unknown.yaml",
        "rules:\n- id: r\n  priority: 1\n  when: {}\n  then:\n    decision: require_approval\n    approval: {approver: [x]}\n",
    );
    let (report, ok) = check_command(&unknown);
    assert!(!ok && report.contains("approver"), "{report}");
}
