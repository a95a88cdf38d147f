//! A commit made ready for the writer thread on the caller's task: checked against itself
//! (`expected_previous_sequence`) and its JSON and timestamps encoded to the text SQLite
//! stores. Every commit waits its turn on the one writer thread, so what does not need the
//! connection is done before the commit is queued, on whichever tokio worker runs the caller,
//! and the thread only binds text and steps statements (docs/benchmarks.md).

use keel_actors::error::StoreError;
use keel_actors::store::Commit;
use keel_actors::time;

use super::super::expected_previous_sequence;
use super::super::rows::{encode_json, encode_payload};

/// A commit and either its encoded text or the reason it cannot be written.
#[derive(Debug)]
pub(super) struct ReadyCommit {
    pub commit: Commit,
    pub encoded: Result<Encoded, StoreError>,
}

impl ReadyCommit {
    /// Checks and encodes `commit`.
    pub fn new(commit: Commit) -> Self {
        let encoded =
            expected_previous_sequence(&commit).and_then(|previous| Encoded::of(&commit, previous));
        Self { commit, encoded }
    }
}

/// The text of one commit's columns, in the order `write::write_commit` binds them.
#[derive(Debug, PartialEq)]
pub(super) struct Encoded {
    /// The stored sequence the commit's events follow (0: the execution is new).
    pub previous_sequence: i64,
    /// Columns written only when the row is inserted (`previous_sequence` 0).
    pub creation: Option<Creation>,
    pub output: Option<String>,
    pub updated_at: String,
    /// Each event's `(timestamp, payload)`, in the commit's order.
    pub events: Vec<(String, String)>,
    /// Each step's `(deadline, updated_at)`, in the commit's order.
    pub steps: Vec<(Option<String>, String)>,
}

/// The columns fixed at creation.
#[derive(Debug, PartialEq)]
pub(super) struct Creation {
    pub labels: Option<String>,
    pub input: String,
    pub created_at: String,
}

impl Encoded {
    fn of(commit: &Commit, previous_sequence: i64) -> Result<Self, StoreError> {
        let execution = &commit.execution;
        let creation = if previous_sequence == 0 {
            Some(Creation {
                labels: execution
                    .labels
                    .as_ref()
                    .map(|labels| encode_json("executions.labels", labels))
                    .transpose()?,
                input: encode_json("executions.input", &execution.input)?,
                created_at: time::format(&execution.created_at),
            })
        } else {
            None
        };
        let mut times = Times::default();
        let events = commit
            .events
            .iter()
            .map(|event| Ok((times.format(&event.timestamp), encode_payload(&event.body)?)))
            .collect::<Result<_, StoreError>>()?;
        let steps = commit
            .steps
            .iter()
            .map(|step| {
                (
                    step.deadline.as_ref().map(time::format),
                    times.format(&step.updated_at),
                )
            })
            .collect();
        Ok(Self {
            previous_sequence,
            creation,
            output: execution
                .output
                .as_ref()
                .map(|output| encode_json("executions.output", output))
                .transpose()?,
            updated_at: times.format(&execution.updated_at),
            events,
            steps,
        })
    }
}

/// Formats the timestamps of one commit. Its events, its row's `updated_at` and its steps'
/// usually carry the same instant (the commit's), which is formatted once and copied after.
#[derive(Default)]
struct Times {
    last: Option<(time::Timestamp, String)>,
}

impl Times {
    fn format(&mut self, at: &time::Timestamp) -> String {
        match &self.last {
            Some((last, text)) if last == at => text.clone(),
            _ => {
                let text = time::format(at);
                self.last = Some((*at, text.clone()));
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::{creations, resume};

    #[test]
    fn a_new_execution_carries_its_creation_columns_and_a_later_commit_only_what_changes() {
        let created = creations("ready", 1).remove(0);
        let row = created.execution.clone();
        let first = ReadyCommit::new(created.clone()).encoded.expect("encodes");
        assert_eq!(first.previous_sequence, 0);
        let creation = first.creation.expect("the creation columns");
        assert_eq!(Some(creation.input), serde_json::to_string(&row.input).ok());
        assert_eq!(creation.created_at, time::format(&row.created_at));
        let event = &created.events[0];
        assert_eq!(
            first.events,
            [(
                time::format(&event.timestamp),
                encode_payload(&event.body).expect("payload encodes")
            )]
        );

        let resumed = resume(&row, 500);
        let later = ReadyCommit::new(resumed.clone()).encoded.expect("encodes");
        assert_eq!(later.previous_sequence, row.last_sequence);
        assert_eq!(later.creation, None);
        assert_eq!(
            later.updated_at,
            time::format(&resumed.execution.updated_at)
        );
        assert_eq!(later.events.len(), resumed.events.len());
    }

    #[test]
    fn a_commit_that_fails_its_own_checks_carries_the_error_instead_of_text() {
        let mut commit = creations("ready-own", 1).remove(0);
        let other = creations("ready-other", 1).remove(0);
        commit.events[0].execution_id = other.execution.id;
        let ready = ReadyCommit::new(commit);
        assert!(
            matches!(ready.encoded, Err(StoreError::Internal(_))),
            "{:?}",
            ready.encoded
        );
    }

    #[test]
    fn each_instant_of_a_commit_is_written_as_its_own_text() {
        use crate::store::conformance::at;
        let mut times = Times::default();
        for micros in [1, 1, 2, 1, 1_500_000, 1_500_000] {
            assert_eq!(times.format(&at(micros)), time::format(&at(micros)));
        }
    }
}
