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

#[tokio::test]
async fn in_cluster_mode_a_key_created_through_another_kernel_is_taken_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, here) = registry(dir.path()).await;
    here.ensure_loaded().await.expect("loaded");
    let alone = KeyRegistry::new(store.clone());
    alone.ensure_loaded().await.expect("loaded");
    here.share_with_other_kernels();
    // Created through another kernel after both read the keys.
    let elsewhere = KeyRegistry::new(store);
    let issued = elsewhere
        .create(new_key("fresh"), "admin")
        .await
        .expect("created");
    let principal = here
        .authenticate_fresh(&issued.token)
        .await
        .expect("taken without waiting for the periodic re-read");
    assert_eq!(&*principal.name, "fresh");
    // A kernel alone on its database does not re-read for an unknown key.
    assert_eq!(
        alone
            .authenticate_fresh(&issued.token)
            .await
            .map(|_| ())
            .map_err(|(why, _)| why),
        Err(Rejected::Unknown)
    );
    // A token nobody issued is still refused, and re-reads are paced.
    let mut forged = issued.token.clone();
    let last = if forged.ends_with('a') { "b" } else { "a" };
    forged.replace_range(forged.len() - 1.., last);
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let unknown = here.authenticate_fresh(&forged).await;
        assert!(matches!(unknown, Err((Rejected::Unknown, None))));
    }
    assert!(started.elapsed() >= MISS_RELOAD_GAP);
}
