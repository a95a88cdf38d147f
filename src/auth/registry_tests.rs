//! The registry across flushes, reloads, revocations and rotations.

use super::*;
use crate::auth::Scopes;

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
