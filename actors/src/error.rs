//! Error kinds shared by every layer. Each error enum maps itself to an [`ErrorCode`]; the HTTP
//! layer turns the code into a status and the JSON envelope of WIRE.md §3.

/// The closed set of error classes a client can see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// 400 `VALIDATION_ERROR`.
    BadRequest,
    /// 401 `UNAUTHORIZED`.
    Unauthorized,
    /// 403 `FORBIDDEN`.
    Forbidden,
    /// 404 `NOT_FOUND`.
    NotFound,
    /// 409 `CONFLICT`.
    Conflict,
    /// 503 `SERVICE_UNAVAILABLE`.
    Unavailable,
    /// 504-class: an actor did not answer in time (sent as 503).
    Timeout,
    /// 500 `INTERNAL_ERROR`.
    Internal,
}

/// Failures of the storage port.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The row asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A uniqueness or sequence constraint was violated.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database cannot be reached, is locked or read-only.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be decoded, or another unexpected failure.
    #[error("store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// Returns the client-facing class of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::Conflict(_) => ErrorCode::Conflict,
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }
}
