//! Who is connected right now: every open agent and runner stream, as the HTTP layer sees it.
//! The streams register here when they open and leave when their response body is dropped
//! (client gone, replaced, kernel shutdown), so the directory (`GET /v0/agents`,
//! `GET /v0/runners`, the console's directory page) never asks an actor. A consumer that
//! reconnects before its old stream is dropped is counted once per open stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use keel_actors::time::{self, Timestamp};
use serde::Serialize;

/// Kind of a registered stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamRole {
    /// `GET /v0/agents/stream`.
    Agent,
    /// `GET /v0/runners/stream`.
    Runner,
}

/// One connected consumer of an agent or a runner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// The consumer id the stream was opened with.
    pub consumer_id: String,
    /// When its (oldest open) stream was opened.
    #[serde(with = "time::serde_micros")]
    pub connected_at: Timestamp,
    /// Capabilities announced on a runner stream (empty for agents).
    pub capabilities: Vec<String>,
    /// Open streams of this consumer (more than one only while a reconnect replaces one).
    pub streams: u32,
}

type Key = (StreamRole, String, String);

/// The registry of open agent and runner streams.
#[derive(Debug, Default)]
pub struct Presence {
    open: Mutex<BTreeMap<Key, Connection>>,
    /// Every agent or runner id that opened a stream since the kernel started.
    seen: Mutex<std::collections::BTreeSet<(StreamRole, String)>>,
}

impl Presence {
    /// Registers an open stream of `id`/`consumer_id`; it counts until the guard is dropped.
    pub fn connected(
        self: &Arc<Self>,
        role: StreamRole,
        id: &str,
        consumer_id: &str,
        capabilities: Vec<String>,
    ) -> PresenceGuard {
        let key = (role, id.to_owned(), consumer_id.to_owned());
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((role, id.to_owned()));
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = open.entry(key.clone()).or_insert_with(|| Connection {
            consumer_id: consumer_id.to_owned(),
            connected_at: time::now(),
            capabilities: Vec::new(),
            streams: 0,
        });
        entry.streams += 1;
        entry.capabilities = capabilities;
        PresenceGuard {
            presence: self.clone(),
            key: Some(key),
        }
    }

    /// Returns the connected ids of `role` with their consumers, ordered by id then consumer.
    pub fn list(&self, role: StreamRole) -> Vec<(String, Vec<Connection>)> {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mut grouped: Vec<(String, Vec<Connection>)> = Vec::new();
        for ((kind, id, _), connection) in open.iter() {
            if *kind != role {
                continue;
            }
            match grouped.last_mut() {
                Some((last, connections)) if last == id => connections.push(connection.clone()),
                _ => grouped.push((id.clone(), vec![connection.clone()])),
            }
        }
        grouped
    }

    /// Returns how many consumers of `id` are connected now, and whether any ever connected
    /// since the kernel started.
    pub fn consumers_of(&self, role: StreamRole, id: &str) -> (usize, bool) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let connected = open
            .keys()
            .filter(|(kind, key_id, _)| *kind == role && key_id == id)
            .count();
        drop(open);
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(role, id.to_owned()));
        (connected, seen)
    }

    fn left(&self, key: &Key) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = open.get_mut(key) {
            entry.streams = entry.streams.saturating_sub(1);
            if entry.streams == 0 {
                open.remove(key);
            }
        }
    }
}

/// Keeps one stream registered while it lives.
#[derive(Debug)]
pub struct PresenceGuard {
    presence: Arc<Presence>,
    key: Option<Key>,
}

impl Drop for PresenceGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.presence.left(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_listed_while_their_guards_live() {
        let presence = Arc::new(Presence::default());
        let first = presence.connected(StreamRole::Agent, "a", "c1", Vec::new());
        let replacement = presence.connected(StreamRole::Agent, "a", "c1", Vec::new());
        let runner = presence.connected(StreamRole::Runner, "r", "rc", vec!["x".to_owned()]);
        let agents = presence.list(StreamRole::Agent);
        assert_eq!(agents.len(), 1);
        assert_eq!(agents[0].0, "a");
        assert_eq!(agents[0].1[0].streams, 2);
        let runners = presence.list(StreamRole::Runner);
        assert_eq!(runners[0].1[0].capabilities, vec!["x".to_owned()]);
        drop(first);
        assert_eq!(presence.list(StreamRole::Agent)[0].1[0].streams, 1);
        drop(replacement);
        assert!(presence.list(StreamRole::Agent).is_empty());
        drop(runner);
        assert!(presence.list(StreamRole::Runner).is_empty());
        // Gone now, but they were here.
        assert_eq!(presence.consumers_of(StreamRole::Agent, "a"), (0, true));
        assert_eq!(presence.consumers_of(StreamRole::Agent, "b"), (0, false));
        let _again = presence.connected(StreamRole::Agent, "a", "c2", Vec::new());
        assert_eq!(presence.consumers_of(StreamRole::Agent, "a"), (1, true));
    }
}
