//! watchcache against naive designs, side by side.
//!
//! The designs live here, in the bench crate only: [`fanout`] (the shared ring against a
//! channel per watcher with deep copies, a channel per watcher with shared bytes, and
//! `tokio::sync::broadcast`), [`cluster`] (the same designs serving a cluster's watchers:
//! kubelets, Node watchers, controllers, operators), [`list`] (streaming against buffered and a materialised
//! `Value` list, with a memcpy reference), [`idle`] (a parked cursor against a task and a
//! channel per watcher), [`http`] (the whole server over loopback, on each transport of
//! [`wire`]), [`kubelets`] (a cluster's kubelets and controllers over the real transport), [`soak`] (the server
//! for minutes under reconnecting, stalled and listing clients), [`snapshots`] (the server's
//! memory under a burst of writes with a paginated LIST through it), [`etcd`] (initial sync,
//! following, restarts and the cost of proving a consistent read on real etcd) and [`patch`]
//! (the cost of a label PATCH against the length of a list in the object) and [`authz`]
//! (what authorization adds to a request, the decision cache warm and defeated) and
//! [`transport`] (what idle TLS and HTTP/2 connections and streams cost the server). The criterion
//! benches
//! in `benches/` and the scenario runner (`src/main.rs`) both drive them.

pub mod alloc;
pub mod authz;
pub mod cluster;
pub mod etcd;
pub mod fanout;
pub mod http;
pub mod idle;
pub mod kubelets;
pub mod list;
pub mod objects;
pub mod operator;
pub mod patch;
pub mod report;
pub mod slow;
pub mod snapshots;
pub mod soak;
pub mod transport;
pub mod vs_etcd;
pub mod wire;
