//! A JSON value as a hash-map key, equal exactly when serde_json's `==` says so: what lets a
//! list be indexed once by its elements (or by their merge keys) instead of searched again for
//! each element of a patch or each field of a field set. Hashing walks the value; an object's
//! entries are hashed in key order, which is the order serde_json's (sorted) maps keep.

use std::hash::{Hash, Hasher};

use serde_json::Value;

/// A borrowed value, hashed and compared as JSON.
#[derive(Clone, Copy, Debug)]
pub struct ValueKey<'a>(pub &'a Value);

impl PartialEq for ValueKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for ValueKey<'_> {}

impl Hash for ValueKey<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        hash_value(self.0, h);
    }
}

/// An owned value, hashed and compared as JSON (for keys that must outlive the list they came
/// from while it changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedKey(pub Value);

impl Hash for OwnedKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        hash_value(&self.0, h);
    }
}

fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => {
            1u8.hash(h);
            b.hash(h);
        }
        // serde_json's numbers hash as they compare: 1 and 1.0 are different, 0.0 and -0.0 not.
        Value::Number(n) => {
            2u8.hash(h);
            n.hash(h);
        }
        Value::String(s) => {
            3u8.hash(h);
            s.hash(h);
        }
        Value::Array(items) => {
            4u8.hash(h);
            items.len().hash(h);
            items.iter().for_each(|i| hash_value(i, h));
        }
        Value::Object(m) => {
            5u8.hash(h);
            m.len().hash(h);
            for (k, v) in m {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_equal_as_json_values_are() {
        let values = [
            json!(1),
            json!(1.0),
            json!(-1),
            json!("1"),
            json!(null),
            json!(true),
            json!([1, 2]),
            json!([2, 1]),
            json!({"a": 1, "b": 2}),
            json!({"a": 1}),
        ];
        let set: HashSet<ValueKey<'_>> = values.iter().map(ValueKey).collect();
        assert_eq!(set.len(), values.len(), "all distinct");
        for v in &values {
            assert!(set.contains(&ValueKey(&v.clone())), "{v}");
        }
        // Built in another key order, an object is the same value.
        let shuffled: Value = serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap();
        assert!(set.contains(&ValueKey(&shuffled)));
        let owned: HashSet<OwnedKey> = values.iter().cloned().map(OwnedKey).collect();
        assert!(owned.contains(&OwnedKey(json!(0.0))) == owned.contains(&OwnedKey(json!(-0.0))));
        assert!(!owned.contains(&OwnedKey(json!(2))));
    }
}
