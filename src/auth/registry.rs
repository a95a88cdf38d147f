//! The key registry: every key held in memory (a request is authenticated without touching the
//! database), loaded from the store on first use and re-read every few seconds (keys written
//! by `keel keys` or another kernel take effect), written through on create, rotate and
//! revoke, with last-used times kept in memory and written in one batch per flush.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use keel_actors::error::StoreError;
use keel_actors::store::{Store, StoredKey};
use keel_actors::time::{self, Timestamp};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::key;
use super::role::{Role, Scopes};

/// How often last-used times are written and the keys re-read from the store.
pub const FLUSH_PERIOD: Duration = Duration::from_secs(5);

/// A key as stored (the `record` column) and as the admin API shows it (without the hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Unique name; the principal its requests act as.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Limits.
    #[serde(default)]
    pub scopes: Scopes,
    /// SHA-256 of the secret, hex (never sent in a response).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_hash: String,
    /// When created.
    #[serde(with = "time::serde_micros")]
    pub created_at: Timestamp,
    /// Principal that created it.
    pub created_by: String,
    /// When it stops working.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<Timestamp>,
    /// When it was revoked.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub revoked_at: Option<Timestamp>,
    /// When its secret was last replaced.
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub rotated_at: Option<Timestamp>,
    /// Last request it authenticated (written in batches, up to [`FLUSH_PERIOD`] late).
    #[serde(
        default,
        with = "time::serde_micros_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_used_at: Option<Timestamp>,
}

impl KeyRecord {
    /// The record as the admin API shows it: no hash, with its public id and state.
    pub fn public_view(&self, public_id: &str, now: Timestamp) -> serde_json::Value {
        let mut record = self.clone();
        record.secret_hash.clear();
        let mut value = serde_json::to_value(record).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.insert("id".to_owned(), public_id.into());
            object.insert("state".to_owned(), self.state(now).into());
        }
        value
    }

    /// `active`, `revoked` or `expired`.
    pub fn state(&self, now: Timestamp) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|at| at <= now) {
            "expired"
        } else {
            "active"
        }
    }
}

/// Who a request acts as.
#[derive(Clone, Debug)]
pub struct Principal {
    /// Key name, `admin` for the `--bearer-token`, `anonymous` without authentication.
    pub name: Arc<str>,
    /// Role.
    pub role: Role,
    /// Limits.
    pub scopes: Arc<Scopes>,
    /// Cancelled when the key is revoked or rotated (open streams end).
    pub revoked: Option<CancellationToken>,
    /// When the key expires (open streams end then).
    pub expires_at: Option<Timestamp>,
}

impl Principal {
    /// The `--bearer-token`: an admin named `admin`.
    pub fn bearer_token() -> Self {
        Self::unlimited("admin")
    }

    /// A kernel without authentication: every request acts as an admin named `anonymous`.
    pub fn anonymous() -> Self {
        Self::unlimited("anonymous")
    }

    fn unlimited(name: &str) -> Self {
        Self {
            name: Arc::from(name),
            role: Role::Admin,
            scopes: Arc::default(),
            revoked: None,
            expires_at: None,
        }
    }

    /// The name recorded on what this principal causes: `None` on a kernel without
    /// authentication (`anonymous`, a name no key may take).
    pub fn recorded_name(&self) -> Option<String> {
        (&*self.name != "anonymous").then(|| self.name.to_string())
    }

    /// Resolves when the key stops being valid (revoked, rotated or expired); never for the
    /// bearer token and open kernels.
    pub async fn invalidated(&self) {
        let expiry = async {
            match self.expires_at {
                Some(at) => {
                    let left = (at - time::now()).to_std().unwrap_or_default();
                    tokio::time::sleep(left).await;
                }
                None => std::future::pending().await,
            }
        };
        match &self.revoked {
            Some(token) => tokio::select! {
                () = token.cancelled() => {}
                () = expiry => {}
            },
            None => expiry.await,
        }
    }
}

/// Why a presented key is refused (401).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Not the shape of a key, or no key has that public id, or the secret differs.
    Unknown,
    /// Revoked (or rotated away).
    Revoked,
    /// Past its expiry.
    Expired,
}

impl Rejected {
    /// The reason logged and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejected::Unknown => "unknown key",
            Rejected::Revoked => "revoked key",
            Rejected::Expired => "expired key",
        }
    }
}

/// Failures of the admin operations.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No key of that name.
    #[error("no key named {0:?}")]
    NotFound(String),
    /// The name is taken.
    #[error("a key named {0:?} already exists")]
    Taken(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One key held in memory.
struct Entry {
    public_id: String,
    record: KeyRecord,
    hash: [u8; 32],
    principal: Principal,
    /// Microseconds since the epoch of the last authenticated request (0: none yet).
    last_used: AtomicI64,
    /// The value of `last_used` last written.
    flushed: AtomicI64,
}

impl Entry {
    /// A new entry for `record`. While the secret stays the same (`previous` has the same
    /// hash) the entry keeps `previous`'s token, so that the streams opened with any earlier
    /// copy of the key end when it is revoked; a revoked record's token is cancelled.
    fn new(public_id: String, record: KeyRecord, previous: Option<&Entry>) -> Self {
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

    fn stored(&self) -> StoredKey {
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
struct Keys {
    by_id: HashMap<String, Arc<Entry>>,
}

impl Keys {
    fn by_name(&self, name: &str) -> Option<&Arc<Entry>> {
        self.by_id.values().find(|entry| entry.record.name == name)
    }
}

/// What a new or rotated key returns: the record and the secret, shown once.
pub struct Issued {
    /// Public id.
    pub public_id: String,
    /// The record (as stored).
    pub record: KeyRecord,
    /// The whole key.
    pub token: String,
}

/// What `create` takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// Unique name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Limits.
    #[serde(default)]
    pub scopes: Scopes,
    /// Expiry (RFC 3339).
    #[serde(default, with = "time::serde_micros_opt")]
    pub expires_at: Option<Timestamp>,
}

/// The registry (one per kernel, shared by every request).
pub struct KeyRegistry {
    store: Arc<dyn Store>,
    keys: RwLock<Keys>,
    loaded: OnceCell<()>,
    /// Serialises admin writes (create, rotate, revoke) so a name check and its write agree.
    writes: tokio::sync::Mutex<()>,
    /// [`KeyRegistry::has_keys`], kept up to date on every change.
    has_keys: AtomicBool,
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

/// Whether two records differ at most in their last use.
fn same_but_last_use(a: &KeyRecord, b: &KeyRecord) -> bool {
    let mut a = a.clone();
    a.last_used_at = b.last_used_at;
    a == *b
}

/// Key names: 1–64 characters of letters, digits, `-`, `_`, `.`, `@`, `:`.
fn validate_name(name: &str) -> Result<(), KeyError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.@:".contains(&byte))
        && !["admin", "anonymous", "system"].contains(&name);
    if ok {
        Ok(())
    } else {
        Err(KeyError::Invalid(format!(
            "key name {name:?}: 1-64 letters, digits or -_.@: (admin, anonymous and system are reserved)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn registry(dir: &std::path::Path) -> (Arc<dyn Store>, KeyRegistry) {
        let url = format!("sqlite://{}", dir.join("keys.db").display());
        let store = crate::store::open(&url, &Default::default())
            .await
            .expect("store opens");
        (store.clone(), KeyRegistry::new(store))
    }

    fn new_key(name: &str) -> NewKey {
        NewKey {
            name: name.to_owned(),
            role: Role::Reader,
            scopes: Scopes::default(),
            expires_at: None,
        }
    }

    fn ended(principal: &Principal) -> bool {
        principal
            .revoked
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
    }

    #[tokio::test]
    async fn a_revocation_ends_the_streams_of_every_copy_of_the_key_across_flushes_and_reloads() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, keys) = registry(dir.path()).await;
        let issued = keys
            .create(new_key("watcher"), "admin")
            .await
            .expect("created");
        let first = keys.authenticate(&issued.token).expect("valid");
        assert_eq!(
            keys.flush().await.expect("flushed"),
            1,
            "the last use is written"
        );
        keys.reload().await.expect("reloaded");
        let second = keys.authenticate(&issued.token).expect("still valid");
        assert!(!ended(&first) && !ended(&second));
        // Revoked by another registry on the same database (another kernel, or `keel keys`).
        let elsewhere = KeyRegistry::new(store);
        elsewhere.revoke("watcher").await.expect("revoked");
        keys.reload().await.expect("reloaded");
        assert!(ended(&first) && ended(&second), "both copies' streams end");
        assert_eq!(
            keys.authenticate(&issued.token)
                .map(|_| ())
                .map_err(|(why, _)| why),
            Err(Rejected::Revoked)
        );
        let listed = keys.list();
        assert_eq!(listed[0]["state"], "revoked");
        assert!(listed[0]["last_used_at"].is_string());
        assert!(listed[0].get("secret_hash").is_none());
    }

    #[tokio::test]
    async fn a_rotation_ends_the_old_secret_and_its_streams_and_keeps_the_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_, keys) = registry(dir.path()).await;
        let issued = keys.create(new_key("svc"), "admin").await.expect("created");
        let before = keys.authenticate(&issued.token).expect("valid");
        let rotated = keys.rotate("svc").await.expect("rotated");
        assert!(ended(&before));
        assert_eq!(rotated.public_id, issued.public_id);
        assert!(keys.authenticate(&issued.token).is_err());
        let after = keys
            .authenticate(&rotated.token)
            .expect("the new secret works");
        assert!(!ended(&after));
        // A forged secret for the same public id is refused.
        let forged = key::generate(&issued.public_id);
        assert!(keys.authenticate(&forged.token).is_err());
        assert!(matches!(
            keys.create(new_key("svc"), "admin").await,
            Err(KeyError::Taken(_))
        ));
    }
}
