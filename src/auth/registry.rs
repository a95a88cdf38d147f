//! The key registry: every key held in memory (a request is authenticated without touching the
//! database), loaded from the store on first use and re-read every few seconds (keys written
//! by `keel keys` or another kernel take effect), written through on create, rotate and
//! revoke, with last-used times kept in memory and written in one batch per flush.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use keel_actors::error::StoreError;
use keel_actors::store::{Store, StoredKey};
use keel_actors::time::{self, Timestamp};
use subtle::ConstantTimeEq as _;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::entry::{Entry, Keys};
use super::key;
use super::principal::{Principal, Rejected};
use super::record::{Issued, KeyError, KeyRecord, NewKey, same_but_last_use, validate_name};
use super::role::Role;

/// How often last-used times are written and the keys re-read from the store.
pub const FLUSH_PERIOD: Duration = Duration::from_secs(5);

/// Shortest time between two re-reads caused by unknown keys (see
/// [`KeyRegistry::authenticate_fresh`]): tokens nobody issued cannot make a kernel read the
/// keys more than four times a second.
pub const MISS_RELOAD_GAP: Duration = Duration::from_millis(250);

/// The registry (one per kernel, shared by every request).
pub struct KeyRegistry {
    store: Arc<dyn Store>,
    keys: RwLock<Keys>,
    loaded: OnceCell<()>,
    /// Serialises admin writes (create, rotate, revoke) so a name check and its write agree.
    writes: tokio::sync::Mutex<()>,
    /// [`KeyRegistry::has_keys`], kept up to date on every change.
    has_keys: AtomicBool,
    /// Whether other kernels write the same keys (cluster mode): an unknown key may then be one
    /// created elsewhere since the last re-read.
    shared: AtomicBool,
    /// When the last re-read caused by an unknown key started.
    miss_reload: tokio::sync::Mutex<Option<std::time::Instant>>,
}

impl KeyRegistry {
    /// A registry over `store`; nothing is read until first used.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            keys: RwLock::default(),
            loaded: OnceCell::new(),
            writes: tokio::sync::Mutex::new(()),
            has_keys: AtomicBool::new(false),
            shared: AtomicBool::new(false),
            miss_reload: tokio::sync::Mutex::new(None),
        }
    }

    /// Marks the keys as written by other kernels too (cluster mode), so that
    /// [`KeyRegistry::authenticate_fresh`] re-reads them on an unknown key.
    pub fn share_with_other_kernels(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }

    /// [`KeyRegistry::authenticate`], and in cluster mode, for a key this kernel does not know
    /// (or whose secret it holds another version of), once more after re-reading the keys: a
    /// key created or rotated through another kernel is taken at once, not after the next
    /// periodic re-read. Re-reads for unknown keys are shared by the requests waiting for them
    /// and at most one per [`MISS_RELOAD_GAP`].
    pub async fn authenticate_fresh(
        &self,
        token: &str,
    ) -> Result<Principal, (Rejected, Option<Arc<str>>)> {
        match self.authenticate(token) {
            Err((Rejected::Unknown, None)) if self.shared.load(Ordering::Relaxed) => {
                self.reload_after_miss(std::time::Instant::now()).await;
                self.authenticate(token)
            }
            outcome => outcome,
        }
    }

    /// Re-reads the keys for a miss noticed at `noticed`, unless a re-read started since.
    async fn reload_after_miss(&self, noticed: std::time::Instant) {
        let mut last = self.miss_reload.lock().await;
        if let Some(started) = *last {
            if started >= noticed {
                return;
            }
            let since = started.elapsed();
            if since < MISS_RELOAD_GAP {
                tokio::time::sleep(MISS_RELOAD_GAP - since).await;
            }
        }
        *last = Some(std::time::Instant::now());
        if let Err(error) = self.reload().await {
            tracing::warn!(error = %error, "re-reading API keys for an unknown key failed");
        }
    }

    /// Reads the keys from the store once (the first request that needs them waits for it).
    pub async fn ensure_loaded(&self) -> Result<(), StoreError> {
        self.loaded
            .get_or_try_init(|| async {
                self.reload().await?;
                Ok::<(), StoreError>(())
            })
            .await
            .map(|_| ())
    }

    /// Whether the keys were read; until then `any_active` is unknown.
    pub fn is_loaded(&self) -> bool {
        self.loaded.initialized()
    }

    /// Whether any key that is not revoked exists (expired ones count: a kernel whose keys
    /// expired stays closed). Until one does, a kernel without `--bearer-token` is open.
    pub fn has_keys(&self) -> bool {
        self.has_keys.load(Ordering::Relaxed)
    }

    fn update_has_keys(&self, keys: &Keys) {
        let any = keys
            .by_id
            .values()
            .any(|entry| entry.record.revoked_at.is_none());
        self.has_keys.store(any, Ordering::Relaxed);
    }

    /// Authenticates a presented token: a lookup by public id in memory and a constant-time
    /// comparison of the secret's hash.
    /// A refusal names the key when the secret matched (a revoked or expired key).
    pub fn authenticate(&self, token: &str) -> Result<Principal, (Rejected, Option<Arc<str>>)> {
        let presented = key::parse(token).ok_or((Rejected::Unknown, None))?;
        let hash = key::hash(presented.secret);
        let keys = self.read();
        let entry = keys
            .by_id
            .get(presented.public_id)
            .ok_or((Rejected::Unknown, None))?;
        if !bool::from(entry.hash.ct_eq(&hash)) {
            return Err((Rejected::Unknown, None));
        }
        let name = || Some(entry.principal.name.clone());
        if entry.record.revoked_at.is_some() {
            return Err((Rejected::Revoked, name()));
        }
        let now = time::now();
        if entry.record.expires_at.is_some_and(|at| at <= now) {
            return Err((Rejected::Expired, name()));
        }
        entry
            .last_used
            .store(now.timestamp_micros(), Ordering::Relaxed);
        Ok(entry.principal.clone())
    }

    /// Every key, as the admin API lists it.
    pub fn list(&self) -> Vec<serde_json::Value> {
        let now = time::now();
        let keys = self.read();
        let mut entries: Vec<&Arc<Entry>> = keys.by_id.values().collect();
        entries.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        entries
            .into_iter()
            .map(|entry| {
                let mut record = entry.record.clone();
                let used = entry.last_used.load(Ordering::Relaxed);
                if used > 0 {
                    record.last_used_at = Timestamp::from_timestamp_micros(used);
                }
                record.public_view(&entry.public_id, now)
            })
            .collect()
    }

    /// Creates a key; the returned token is the only copy of its secret.
    pub async fn create(&self, new: NewKey, created_by: &str) -> Result<Issued, KeyError> {
        validate_name(&new.name)?;
        new.scopes.validate().map_err(KeyError::Invalid)?;
        match new.role {
            Role::Agent if new.scopes.agents.is_empty() => {
                return Err(KeyError::Invalid(
                    "an agent key needs at least one agent scope (scopes.agents)".to_owned(),
                ));
            }
            Role::Runner if new.scopes.runners.is_empty() => {
                return Err(KeyError::Invalid(
                    "a runner key needs at least one runner scope (scopes.runners)".to_owned(),
                ));
            }
            _ => {}
        }
        let now = time::now();
        if new.expires_at.is_some_and(|at| at <= now) {
            return Err(KeyError::Invalid("expires_at is in the past".to_owned()));
        }
        self.ensure_loaded().await?;
        let _write = self.writes.lock().await;
        if self.read().by_name(&new.name).is_some() {
            return Err(KeyError::Taken(new.name));
        }
        let generated = key::generate(&key::public_id());
        let record = KeyRecord {
            name: new.name,
            role: new.role,
            scopes: new.scopes,
            secret_hash: hex::encode(key::hash(&generated.secret)),
            created_at: now,
            created_by: created_by.to_owned(),
            expires_at: new.expires_at,
            revoked_at: None,
            rotated_at: None,
            last_used_at: None,
        };
        self.write_through(&generated.public_id, record.clone())
            .await?;
        Ok(Issued {
            public_id: generated.public_id,
            record,
            token: generated.token,
        })
    }

    /// Replaces a key's secret: the old one stops working at once (its open streams end), the
    /// name, role and scopes stay.
    pub async fn rotate(&self, name: &str) -> Result<Issued, KeyError> {
        self.ensure_loaded().await?;
        let _write = self.writes.lock().await;
        let (public_id, mut record, old) = self.current(name)?;
        if record.revoked_at.is_some() {
            return Err(KeyError::Invalid(format!("key {name:?} is revoked")));
        }
        let generated = key::generate(&public_id);
        record.secret_hash = hex::encode(key::hash(&generated.secret));
        record.rotated_at = Some(time::now());
        self.write_through(&public_id, record.clone()).await?;
        if let Some(token) = &old.principal.revoked {
            token.cancel();
        }
        Ok(Issued {
            public_id,
            record,
            token: generated.token,
        })
    }

    /// Revokes a key: refused from the next request on, its open streams end.
    pub async fn revoke(&self, name: &str) -> Result<serde_json::Value, KeyError> {
        self.ensure_loaded().await?;
        let _write = self.writes.lock().await;
        let (public_id, mut record, old) = self.current(name)?;
        if record.revoked_at.is_none() {
            record.revoked_at = Some(time::now());
            self.write_through(&public_id, record.clone()).await?;
        }
        if let Some(token) = &old.principal.revoked {
            token.cancel();
        }
        Ok(record.public_view(&public_id, time::now()))
    }

    fn current(&self, name: &str) -> Result<(String, KeyRecord, Arc<Entry>), KeyError> {
        let keys = self.read();
        let entry = keys
            .by_name(name)
            .ok_or_else(|| KeyError::NotFound(name.to_owned()))?;
        Ok((entry.public_id.clone(), entry.record.clone(), entry.clone()))
    }

    /// Writes one key to the store, then to memory.
    async fn write_through(&self, public_id: &str, record: KeyRecord) -> Result<(), KeyError> {
        let previous = self.read().by_id.get(public_id).cloned();
        let entry = Entry::new(public_id.to_owned(), record, previous.as_deref());
        if let Some(old) = &previous {
            entry
                .last_used
                .store(old.last_used.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        match self.store.put_api_keys(&[entry.stored()]).await {
            Ok(()) => {}
            Err(StoreError::Conflict(_)) => return Err(KeyError::Taken(entry.record.name)),
            Err(error) => return Err(error.into()),
        }
        let mut keys = self.write();
        keys.by_id.insert(public_id.to_owned(), Arc::new(entry));
        self.update_has_keys(&keys);
        Ok(())
    }

    /// Re-reads every key from the store: changes made elsewhere take effect (a revoked key's
    /// streams end), and last-used times in memory are kept.
    pub async fn reload(&self) -> Result<(), StoreError> {
        let stored = self.store.api_keys().await?;
        let mut fresh = HashMap::with_capacity(stored.len());
        for key in stored {
            let record: KeyRecord = match serde_json::from_value(key.record) {
                Ok(record) => record,
                Err(error) => {
                    tracing::warn!(key = %key.name, error = %error, "ignoring an undecodable API key");
                    continue;
                }
            };
            fresh.insert(key.public_id, record);
        }
        let mut keys = self.write();
        let mut next = HashMap::with_capacity(fresh.len());
        for (public_id, record) in fresh {
            let entry = match keys.by_id.remove(&public_id) {
                // Unchanged but for the last use (which this kernel may have written itself).
                Some(old) if same_but_last_use(&old.record, &record) => old,
                Some(old) => {
                    let entry = Entry::new(public_id.clone(), record, Some(&old));
                    if old.hash != entry.hash
                        && let Some(token) = &old.principal.revoked
                    {
                        // Another secret: the old one's streams end.
                        token.cancel();
                    }
                    let used = old.last_used.load(Ordering::Relaxed);
                    entry.last_used.fetch_max(used, Ordering::Relaxed);
                    Arc::new(entry)
                }
                None => Arc::new(Entry::new(public_id.clone(), record, None)),
            };
            next.insert(public_id, entry);
        }
        for gone in keys.by_id.values() {
            if let Some(token) = &gone.principal.revoked {
                token.cancel();
            }
        }
        keys.by_id = next;
        self.update_has_keys(&keys);
        Ok(())
    }

    /// Writes the last-used times that changed since the previous flush, in one transaction.
    pub async fn flush(&self) -> Result<usize, StoreError> {
        let changed: Vec<(Arc<Entry>, i64)> = self
            .read()
            .by_id
            .values()
            .filter_map(|entry| {
                let used = entry.last_used.load(Ordering::Relaxed);
                (used != entry.flushed.load(Ordering::Relaxed)).then(|| (entry.clone(), used))
            })
            .collect();
        if changed.is_empty() {
            return Ok(0);
        }
        let _write = self.writes.lock().await;
        let stored: Vec<StoredKey> = changed.iter().map(|(entry, _)| entry.stored()).collect();
        self.store.put_api_keys(&stored).await?;
        for (entry, used) in &changed {
            entry.flushed.store(*used, Ordering::Relaxed);
        }
        Ok(changed.len())
    }

    /// Flushes last-used times and re-reads the keys every [`FLUSH_PERIOD`] until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(FLUSH_PERIOD) => {}
            }
            if !self.is_loaded() {
                continue;
            }
            if let Err(error) = self.flush().await {
                tracing::warn!(error = %error, "writing API keys' last use failed");
            }
            if let Err(error) = self.reload().await {
                tracing::warn!(error = %error, "re-reading API keys failed");
            }
        }
        let _ = self.flush().await;
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
