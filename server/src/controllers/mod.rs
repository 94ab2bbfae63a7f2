//! The controllers the server runs itself, because clients wait for what they make (no
//! workload controller runs here: a Deployment makes no ReplicaSet).
//!
//! - `crds.rs`: serves what each CustomResourceDefinition defines, and stops once it is gone.
//! - `namespace_controller.rs`: empties a namespace being deleted, then deletes it.
//! - `pod_gc.rs`: finishes graceful pod deletions no kubelet will finish.
//! - `system_objects.rs`: each namespace's `default` ServiceAccount, `kube-root-ca.crt`, and
//!   the `kubernetes` Service, Endpoints and EndpointSlice.
//! - `rbac_objects/`: the bootstrap RBAC policy, and ClusterRole aggregation.

pub(crate) mod crds;
pub(crate) mod namespace_controller;
pub(crate) mod pod_gc;
pub(crate) mod rbac_objects;
pub(crate) mod system_objects;
