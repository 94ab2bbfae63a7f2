//! `watchcache serve`: a Kubernetes-compatible HTTP facade over the watch cache, so that
//! kubectl and kube-rs use it as they use kube-apiserver.
//!
//! Resources `pods`, `configmaps`, `secrets` (namespaced), `namespaces` and `nodes`, each with
//! its own cache and upstream watch on the embedded
//! [`MemorySource`](watchcache_core::MemorySource) or, with the `etcd` feature and `--etcd`,
//! on an etcd cluster ([`Backend`]). Discovery (`/version`,
//! `/api`, `/apis`, `/api/v1`); LIST, GET and WATCH with the apiserver's parameters; POST,
//! PUT and DELETE to the source; `/healthz`, `/readyz` and `/metrics`. LIST bodies are
//! streamed in bounded chunks; watch frames are copied from shared bytes into each
//! connection's own bounded buffer.

#![warn(missing_docs)]

mod app;
mod apply;
pub mod backend;
pub mod config;
mod connection;
mod discovery;
mod errors;
mod fields;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;
pub mod metrics;
mod namespace_controller;
mod namespaces;
mod openapi;
mod openapi_pb;
mod params;
mod patch;
mod reads;
pub mod resources;
mod response;
mod routes;
mod server;
mod strategic;
mod switch;
mod table;
mod target;
mod watch_body;
pub mod workload;
mod writes;

pub use backend::Backend;
pub use config::ServeConfig;
pub use metrics::Metrics;
pub use server::{ServeError, Server};
