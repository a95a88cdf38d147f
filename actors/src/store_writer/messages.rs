//! Messages of the store writer.

use std::time::Duration;

use ractor::RpcReplyPort;

use crate::error::StoreError;
use crate::store::Commit;

/// Messages of the store writer.
pub enum StoreWriterMsg {
    /// Makes one execution's changes durable; answers after the transaction commits.
    Append(Box<Commit>, RpcReplyPort<Result<(), StoreError>>),
    /// A transaction finished (sent by the writer to itself).
    Flushed(Vec<Result<(), StoreError>>, Duration),
}
