//! The RBAC objects as the server stores them: the apiserver's bootstrap policy, written at
//! start (`bootstrap.rs`); the ClusterRole aggregation controller (`aggregation.rs`); and the
//! policy the authorizer decides on, read from the server's own caches of the four kinds
//! (`policy.rs`).
//!
//! Apart from `auth`, which decides on a [`PolicySource`](crate::auth::PolicySource) and
//! knows nothing of caches, resources or the store: this module is where the two meet.

pub(crate) mod aggregation;
pub(crate) mod bootstrap;
pub(crate) mod policy;
