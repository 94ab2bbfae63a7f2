//! `watchcache serve`: a Kubernetes-compatible HTTP facade over the watch cache, so that
//! kubectl, kube-rs, client-go and the Python client use it as they use kube-apiserver.
//!
//! Resources `pods`, `configmaps`, `secrets`, `events` (namespaced), `namespaces`, `nodes`,
//! `coordination.k8s.io/v1` `leases` and the `rbac.authorization.k8s.io/v1` kinds (with the
//! bootstrap policy written at start), each with its own cache and upstream watch on the
//! embedded [`MemorySource`](watchcache_core::MemorySource) or, with the `etcd` feature and
//! `--etcd`, on an etcd cluster ([`Backend`]). Discovery (legacy and aggregated) and OpenAPI
//! v2 and v3; LIST, GET and WATCH with the apiserver's parameters, as JSON, Kubernetes
//! protobuf or Tables; POST, PUT (bodies in JSON, YAML or protobuf), PATCH (JSON, merge, strategic merge, server-side apply), DELETE and DeleteCollection
//! to the source, with `managedFields`, `/status`, finalizers and namespace lifecycle;
//! `/healthz`, `/readyz` and `/metrics`. Every request is authenticated (a client
//! certificate, a `--token-auth-file` bearer token, or anonymous) and authorized (AlwaysAllow,
//! or RBAC with the self-checks `kubectl auth can-i` asks) before any handler runs ([`auth`]). LIST bodies are streamed in bounded chunks; watch
//! frames are copied from shared bytes into each connection's own bounded buffer.

#![warn(missing_docs)]

mod app;
mod audit;
pub mod auth;
pub mod backend;
pub mod config;
mod connection;
mod conversion;
mod crds;
mod deletion;
mod discovery;
mod errors;
mod eviction;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;
mod generate_name;
mod leases;
mod media;
pub mod metrics;
mod namespace_controller;
mod namespaces;
mod offload;
mod params;
mod partial;
mod pod_gc;
mod rbac_objects;
mod reads;
mod request_info;
mod request_log;
pub mod resources;
mod response;
mod routes;
mod scale;
mod server;
mod service_ranges;
pub mod services;
mod stored;
mod switch;
mod system_objects;
mod table;
mod target;
mod transport;

mod watch_body;
pub mod workload;
mod writes;

pub use backend::Backend;
pub use config::{AuditConfig, PlaintextRefused, ServeConfig};
pub use metrics::Metrics;
pub use server::{ServeError, Server};
