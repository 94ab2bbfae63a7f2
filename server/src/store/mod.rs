//! The store behind the server, and what the server keeps in it beside the objects.
//!
//! - [`backend`]: the store the caches follow and writes go to (embedded, etcd, or your own).
//! - [`resources`]: for each kind served, its cache, codec and watch frames.
//! - `stored.rs`: what may be stored (etcd's size limit, a protobuf form).
//! - `leases.rs`: store leases shared by objects with a time to live (Events).

pub mod backend;
pub(crate) mod leases;
pub mod resources;
pub(crate) mod stored;
