//! The registry's in-memory entries: one per key, with its principal (whose token ends the
//! key's streams) and its last use, and the table of them by public id.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use keel_actors::store::StoredKey;
use keel_actors::time::Timestamp;

use super::principal::Principal;
use super::record::KeyRecord;

/// One key held in memory.
pub(super) struct Entry {
    pub(super) public_id: String,
    pub(super) record: KeyRecord,
    pub(super) hash: [u8; 32],
    pub(super) principal: Principal,
    /// Microseconds since the epoch of the last authenticated request (0: none yet).
    pub(super) last_used: AtomicI64,
    /// The value of `last_used` last written.
    pub(super) flushed: AtomicI64,
}

impl Entry {
    /// A new entry for `record`. While the secret stays the same (`previous` has the same
    /// hash) the entry keeps `previous`'s token, so that the streams opened with any earlier
    /// copy of the key end when it is revoked; a revoked record's token is cancelled.
    pub(super) fn new(public_id: String, record: KeyRecord, previous: Option<&Entry>) -> Self {
        let mut hash = [0u8; 32];
        let _ = hex::decode_to_slice(&record.secret_hash, &mut hash);
        let token = previous
            .filter(|previous| previous.hash == hash)
            .and_then(|previous| previous.principal.revoked.clone())
            .unwrap_or_default();
        if record.revoked_at.is_some() {
            token.cancel();
        }
        let principal = Principal {
            name: Arc::from(record.name.as_str()),
            role: record.role,
            scopes: Arc::new(record.scopes.clone()),
            revoked: Some(token),
            expires_at: record.expires_at,
        };
        let used = record.last_used_at.map_or(0, |at| at.timestamp_micros());
        Self {
            public_id,
            record,
            hash,
            principal,
            last_used: AtomicI64::new(used),
            flushed: AtomicI64::new(used),
        }
    }

    pub(super) fn stored(&self) -> StoredKey {
        let mut record = self.record.clone();
        let used = self.last_used.load(Ordering::Relaxed);
        if used > 0 {
            record.last_used_at = Timestamp::from_timestamp_micros(used);
        }
        StoredKey {
            public_id: self.public_id.clone(),
            name: record.name.clone(),
            record: serde_json::to_value(&record).unwrap_or_default(),
        }
    }
}

/// Keys by public id.
#[derive(Default)]
pub(super) struct Keys {
    pub(super) by_id: HashMap<String, Arc<Entry>>,
}

impl Keys {
    pub(super) fn by_name(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_id.values().find(|entry| entry.record.name == name)
    }
}
