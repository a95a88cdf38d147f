//! Answers many routes share, written once: each is an `IntoResponses` type that a
//! `#[utoipa::path]` lists in its `responses(...)` beside its own tuples.

#![allow(dead_code)] // The types only carry the attributes.

use utoipa::IntoResponses;

use super::schemas::Error;

/// 401 of a route behind the kernel's bearer token.
#[derive(IntoResponses)]
#[response(status = 401, description = "Missing or wrong bearer token")]
pub struct Unauthorized(Error);

/// 400 of a route with an id in its path.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Invalid path or query (an id over 256 bytes, a query key given twice)"
)]
pub struct BadPath(Error);
