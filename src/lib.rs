
pub mod http;
pub mod policy;
pub mod store;
