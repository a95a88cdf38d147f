//! Who a request acts as (`Principal`), and why a presented key is refused (`Rejected`).

use std::sync::{Arc, LazyLock};

use keel_actors::time::{self, Timestamp};
use tokio_util::sync::CancellationToken;

use super::role::{Role, Scopes};

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
        // Built once: a request's principal is then two reference counts, not two allocations.
        static ADMIN: LazyLock<Principal> = LazyLock::new(|| Principal::unlimited("admin"));
        ADMIN.clone()
    }

    /// A kernel without authentication: every request acts as an admin named `anonymous`.
    pub fn anonymous() -> Self {
        static ANONYMOUS: LazyLock<Principal> = LazyLock::new(|| Principal::unlimited("anonymous"));
        ANONYMOUS.clone()
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
