//! The storage-key layout a source keeps objects under: `PREFIX + namespace + "/" + name` for
//! namespaced objects and `PREFIX + name` for cluster-scoped ones, the layout of the
//! apiserver's `/registry/<resource>/…` keys in etcd.

use crate::object::ObjectKey;

/// The storage key of `key` under `prefix`.
///
/// ```
/// use watchcache_core::ObjectKey;
/// use watchcache_core::source::{parse_storage_key, storage_key};
///
/// let key = ObjectKey::new("default", "web-0");
/// assert_eq!(storage_key("/registry/pods/", &key), "/registry/pods/default/web-0");
/// assert_eq!(parse_storage_key("/registry/pods/", "/registry/pods/default/web-0"), Some(key));
/// ```
pub fn storage_key(prefix: &str, key: &ObjectKey) -> String {
    if key.namespace().is_empty() {
        format!("{prefix}{}", key.name())
    } else {
        format!("{prefix}{}/{}", key.namespace(), key.name())
    }
}

/// The object key a storage key under `prefix` names, if it has the expected shape.
pub fn parse_storage_key(prefix: &str, key: &str) -> Option<ObjectKey> {
    let rest = key.strip_prefix(prefix)?;
    let key = match rest.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            ObjectKey::new(ns, name)
        }
        None if !rest.is_empty() => ObjectKey::cluster(rest),
        _ => return None,
    };
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_keys_round_trip_and_malformed_ones_are_refused() {
        for key in [ObjectKey::new("ns", "a"), ObjectKey::cluster("node-1")] {
            let s = storage_key("pods/", &key);
            assert_eq!(parse_storage_key("pods/", &s), Some(key));
        }
        assert_eq!(
            storage_key("/registry/pods/", &ObjectKey::new("ns", "a")),
            "/registry/pods/ns/a"
        );
        for bad in ["pods/", "pods//a", "pods/ns/", "pods/a/b/c", "other/ns/a"] {
            assert_eq!(parse_storage_key("pods/", bad), None, "{bad:?}");
        }
    }
}
