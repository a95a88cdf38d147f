//! Webhook signatures: `Keel-Signature: v1=<hex>` where `<hex>` is the HMAC-SHA256, keyed with
//! the subscription's secret, of `<Keel-Timestamp>.<body>` (the timestamp header's value, a
//! dot, then the raw request body). Signing the timestamp with the body lets a receiver refuse
//! replays: it recomputes the MAC and rejects a delivery whose timestamp is too old.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "keel-signature";
/// Header carrying the signing time, in Unix seconds.
pub const TIMESTAMP_HEADER: &str = "keel-timestamp";

/// Returns the `Keel-Signature` value of `body` sent at `timestamp` (Unix seconds).
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!("v1={}", hex::encode(mac(secret, timestamp, body)))
}

/// Checks a `Keel-Signature` value in constant time (what a receiver does).
pub fn verify(secret: &[u8], timestamp: i64, body: &[u8], header: &str) -> bool {
    let Some(hex_mac) = header.trim().strip_prefix("v1=") else {
        return false;
    };
    let Ok(expected) = hex::decode(hex_mac) else {
        return false;
    };
    keyed(secret, timestamp, body)
        .verify_slice(&expected)
        .is_ok()
}

fn keyed(secret: &[u8], timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("hmac accepts every key length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Vec<u8> {
    keyed(secret, timestamp, body)
        .finalize()
        .into_bytes()
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // The expected value comes from `printf '1.{}' | openssl dgst -sha256 -hmac key`.
        let value = signature(b"key", 1, b"{}");
        assert_eq!(
            value,
            "v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224"
        );
        assert!(verify(b"key", 1, b"{}", &value));
        assert!(!verify(b"other", 1, b"{}", &value));
        assert!(!verify(b"key", 2, b"{}", &value));
        assert!(!verify(b"key", 1, b"{ }", &value));
        assert!(!verify(b"key", 1, b"{}", "v1=zz"));
        assert!(!verify(b"key", 1, b"{}", &value[3..]));
    }
}
