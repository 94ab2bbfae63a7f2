//! The audit log: one `audit.k8s.io/v1` `Event` per request at the level a policy gives it,
//! written as JSON lines to a file that rotates by size, as kube-apiserver's `--audit-log-*`
//! flags have it.
//!
//! - `policy.rs`: the levels per request, from the apiserver's `Policy` YAML (first rule that
//!   matches wins).
//! - `event.rs`: what an event holds and its JSON.
//! - `log.rs`: the bounded queue to the writer thread (full: the event is dropped and counted,
//!   the request never waits) and the rotating file.

mod event;
mod log;
mod policy;
pub(crate) mod request_log;

pub(crate) use event::{Event, Stage};
pub(crate) use log::AuditLog;
pub(crate) use policy::{Policy, Stages};
