//! Kubernetes API kinds with no HTTP: what a server needs to know of each kind it serves.
//!
//! - [`registry`]: one declaration per kind ([`KindSpec`]) — names, scope, subresources,
//!   selectable fields, printer, strategy, protobuf message, OpenAPI schema, storage — and the
//!   [`Registry`] of the kinds a server serves, with the built-in ones
//!   ([`Registry::builtin`]).
//! - [`validation`]: the apiserver's validation of what users meet daily, plain values in and a
//!   typed refusal out.
//! - [`printers`]: the columns and cells of `kubectl get`'s Tables.
//! - [`mutation`]: patches, server-side apply and managed fields.
//! - [`schema`]: a CRD's structural schema: pruning, defaulting and validation with CEL.
//! - [`openapi`]: the OpenAPI v2 and v3 documents of the kinds served, and the value types
//!   and field pruning of built-in kinds' objects by their schemas.
//!
//! ```
//! use watchcache_api::{KindSpec, Registry};
//! use watchcache_api::printers::{self, Printer};
//!
//! let mut registry = Registry::builtin();
//! let widgets = KindSpec::new("example.com", "v1", "Widget", "widgets")
//!     .short_names(&["wg"])
//!     .status()
//!     .fields(&["spec.color"])
//!     .printer(Printer::of(vec![
//!         printers::name(),
//!         printers::path_col("Color", "string", "", 0, "The widget's color.", "spec.color"),
//!         printers::age(),
//!     ]));
//! let widgets = registry.add(widgets).unwrap();
//! assert_eq!(widgets.prefix(), "/registry/example.com/widgets/");
//! assert!(registry.get("apps/v1", "deployments").is_some());
//! ```

#![warn(missing_docs)]

pub mod crd;
mod kinds;
pub mod mutation;
pub mod openapi;
pub mod printers;
pub mod registry;
pub mod schema;
pub mod validation;

pub use registry::{
    DeletionRule, GracePeriod, KindSpec, Lists, NameRule, Registry, ScalePaths, SelectableField, Strategy,
    Subresources,
};
