
pub mod policy;
pub mod store;
