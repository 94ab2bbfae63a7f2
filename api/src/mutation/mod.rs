//! What a write does to an object before it is stored, with no HTTP: the three patch types
//! ([`patch`]: JSON, merge, and [`strategic`] merge with its directives and list strategies),
//! server-side apply ([`apply`]) with field ownership ([`fields`]: `managedFields` as the
//! apiserver records them), the values lists are keyed by ([`value_key`]), and YAML bodies
//! parsed with bounds ([`yaml`]). Errors are `metav1.Status`es, as the apiserver answers them.

pub mod apply;
pub mod fields;
pub mod patch;
pub mod strategic;
pub mod value_key;
pub mod yaml;
