//! The shape of an API key: `keel_<public id>_<secret>`, a 12-character public id (the lookup
//! column) and a 48-character secret of which only the SHA-256 is stored. The shape is checked
//! before any lookup, so a malformed token never reaches the key table.

use rand::Rng as _;
use rand::distr::Alphanumeric;
use sha2::{Digest as _, Sha256};

/// Start of every key.
pub const PREFIX: &str = "keel_";
/// Length of the public id.
pub const PUBLIC_ID_LEN: usize = 12;
/// Length of the secret.
pub const SECRET_LEN: usize = 48;

/// A token split into its parts (shape checked, nothing looked up).
#[derive(Debug, PartialEq, Eq)]
pub struct Presented<'a> {
    /// The public id.
    pub public_id: &'a str,
    /// The secret.
    pub secret: &'a str,
}

/// Splits `token` when it has the shape of a key; `None` otherwise.
pub fn parse(token: &str) -> Option<Presented<'_>> {
    let rest = token.strip_prefix(PREFIX)?;
    let (public_id, secret) = rest.split_once('_')?;
    let shaped = public_id.len() == PUBLIC_ID_LEN
        && secret.len() == SECRET_LEN
        && public_id.bytes().all(|byte| byte.is_ascii_alphanumeric())
        && secret.bytes().all(|byte| byte.is_ascii_alphanumeric());
    shaped.then_some(Presented { public_id, secret })
}

/// SHA-256 of a secret.
pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A new key: its public id, its secret and the whole token shown to the user once.
pub struct Generated {
    /// The public id.
    pub public_id: String,
    /// The secret (never stored).
    pub secret: String,
    /// `keel_<public id>_<secret>`.
    pub token: String,
}

/// Returns a fresh random public id.
pub fn public_id() -> String {
    random(PUBLIC_ID_LEN).to_ascii_lowercase()
}

/// Returns a fresh key for `public_id` (a new key, or a rotation of an existing one).
pub fn generate(public_id: &str) -> Generated {
    let secret = random(SECRET_LEN);
    Generated {
        public_id: public_id.to_owned(),
        token: format!("{PREFIX}{public_id}_{secret}"),
        secret,
    }
}

fn random(len: usize) -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_and_odd_shapes_do_not() {
        let key = generate(&public_id());
        let presented = parse(&key.token).expect("a generated key parses");
        assert_eq!(presented.public_id, key.public_id);
        assert_eq!(presented.secret, key.secret);
        assert_eq!(hash(presented.secret), hash(&key.secret));
        let secret = "a".repeat(SECRET_LEN);
        for bad in [
            String::new(),
            "keel_".to_owned(),
            format!("keel_abc_{secret}"),
            format!("keel_abcdefghijkl_{}", "a".repeat(SECRET_LEN - 1)),
            format!("keel_abcdefghijk!_{secret}"),
            format!("key_abcdefghijkl_{secret}"),
            format!("keel_abcdefghijkl_{secret}_"),
        ] {
            assert!(parse(&bad).is_none(), "{bad}");
        }
        assert!(parse(&format!("keel_abcdefghijkl_{secret}")).is_some());
    }
}
