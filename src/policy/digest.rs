//! The digest of a loaded policy: a stable hash of its files that names the policy version in
//! logs, `/health` and metrics.

/// FNV-1a, 64 bits: a stable, dependency-free hash for policy digests (not cryptographic; the
/// digest identifies a policy version in logs, it does not authenticate it).
pub(super) struct Fnv64(u64);

impl Fnv64 {
    /// Returns the hash of nothing.
    pub fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Returns the hash as 16 lowercase hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}
