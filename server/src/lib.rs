//! `watchcache serve`: a Kubernetes-compatible HTTP facade over the watch cache, so that
//! kubectl, kube-rs, client-go and the Python client use it as they use kube-apiserver.
//!
//! The kinds of [`watchcache_api::Registry::builtin`] (core, apps, batch, networking,
//! policy, autoscaling, storage, scheduling, coordination, events, discovery, RBAC with the
//! bootstrap policy written at start, and CustomResourceDefinitions with the custom resources
//! they define), each with its own cache and upstream watch on the
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

mod audit;
pub mod auth;
pub mod config;
mod controllers;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz;
mod handlers;
pub mod metrics;
mod server;
pub mod store;
mod transport;
pub mod workload;

pub use config::{AuditConfig, PlaintextRefused, ServeConfig};
pub use metrics::Metrics;
pub use server::{ServeError, Server};
pub use store::backend::Backend;
