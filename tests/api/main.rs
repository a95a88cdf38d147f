//! HTTP/SSE end-to-end tests: each test starts a kernel in-process (temp SQLite store, random
//! port) and drives it over real HTTP with scripted agents and runners.

mod agents;
mod errors;
mod executions;
mod harness;
mod runners;
mod sse;
