//! The API handlers: what the server answers once a request has been authenticated and
//! authorized.
//!
//! - `routes.rs`: which handler serves a method and path; `target.rs`: the resource a path
//!   addresses; `app.rs`: the state every handler shares.
//! - `params.rs` and `media.rs`: query parameters and content negotiation, parsed once.
//! - `errors.rs` and `response.rs`: every failure as the apiserver's `metav1.Status`.
//! - `discovery.rs`: `/version`, `/api`, `/apis` and aggregated discovery.
//! - `reads/`: LIST, GET and WATCH from the caches, as JSON, protobuf, Tables or metadata.
//! - `writes/`: POST, PUT, PATCH, DELETE to the store, with the subresources that write and
//!   the Service addresses a write allocates.

pub(crate) mod app;
pub(crate) mod discovery;
pub(crate) mod errors;
pub(crate) mod media;
pub(crate) mod params;
pub(crate) mod reads;
pub(crate) mod response;
pub(crate) mod routes;
pub(crate) mod target;
pub(crate) mod writes;
