//! YAML request bodies (POST and PUT in `application/yaml`, server-side apply) read into JSON
//! values, with what aliases can expand to bounded: the CVE-2019-11253 class, where a few
//! kilobytes of anchors and aliases (`*a` repeated, or nested "billion laughs") expand to
//! gigabytes. serde_yaml_ng replays an alias's events each time it is used, and its own
//! guard counts replays, not what they expand to.
//!
//! The values are built by a serde seed that spends a budget as it goes: one unit per value
//! and one per byte of each string, key or scalar. Without aliases a body cannot spend more
//! than its own length (every value and byte is spelled out in it), so the budget is twice the
//! body's length and 64 KiB more: room for anchors used as they are meant to be, and a bound of
//! the same order as the body limit on anything else. Nesting is bounded by serde_yaml_ng (128
//! levels).

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The slack beyond twice a body's length that its aliases may expand to.
const SLACK: usize = 64 << 10;

/// A YAML body that is not YAML, or that expands past its budget.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

/// What a body of `len` bytes may expand to, in units of values and bytes.
pub fn budget(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(SLACK)
}

/// Reads one YAML document into a JSON value, its aliases' expansion bounded by [`budget`].
pub fn parse(body: &[u8]) -> Result<Value, YamlError> {
    let left = Cell::new(budget(body.len()));
    Node { left: &left }
        .deserialize(serde_yaml_ng::Deserializer::from_slice(body))
        .map_err(|e| YamlError(e.to_string()))
}

/// One value, built while the budget `left` lasts.
#[derive(Copy, Clone)]
struct Node<'b> {
    left: &'b Cell<usize>,
}

impl Node<'_> {
    fn spend<E: de::Error>(self, units: usize) -> Result<(), E> {
        match self.left.get().checked_sub(units.saturating_add(1)) {
            Some(rest) => {
                self.left.set(rest);
                Ok(())
            }
            None => Err(E::custom(
                "the YAML expands, through its aliases, to more than twice the size of the body",
            )),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value that JSON can hold")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.spend(0)?;
        // As serde_json reads a float JSON cannot write (`.nan`, `.inf`): null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.spend(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.spend(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend(0)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend(0)?;
        let mut out = Map::new();
        while let Some(k) = map.next_key_seed(Key(self))? {
            let v = map.next_value_seed(self)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping's key: a string, or a number or boolean written as one (JSON's keys are strings).
struct Key<'b>(Node<'b>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        match self.0.deserialize(d)? {
            Value::String(s) => Ok(s),
            v @ (Value::Number(_) | Value::Bool(_)) => Ok(v.to_string()),
            other => Err(de::Error::custom(format!(
                "a mapping key must be a string, not {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml_reads_as_json_with_anchors_used_as_meant() {
        let v = parse(b"metadata:\n  name: x\n  labels:\n    app: &a web\n    tier: *a\nn: 1\nf: 1.5\nb: true\nz: ~\n1: one\n").unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"name": "x", "labels": {"app": "web", "tier": "web"}}, "n": 1, "f": 1.5, "b": true, "z": null, "1": "one"})
        );
        assert!(parse(b"a: [unclosed").is_err());
        assert!(parse(b"a: 1\n---\nb: 2\n").is_err(), "one document");
    }

    #[test]
    fn aliases_cannot_expand_past_twice_the_body() {
        // Wide: 10,000 uses of a 1 KiB string (70 KB that would be 10 MB).
        let mut wide = format!("a: &a {}\nl:\n", "x".repeat(1024));
        for _ in 0..10_000 {
            wide.push_str("- *a\n");
        }
        let err = parse(wide.as_bytes()).unwrap_err();
        assert!(err.0.contains("twice the size"), "{err}");
        // Deep: nine levels of nine (9^9 strings from 300 bytes).
        let mut laughs = String::from("l0: &l0 lol\n");
        for i in 1..10 {
            let refs = vec![format!("*l{}", i - 1); 9].join(", ");
            laughs.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        assert!(parse(laughs.as_bytes()).is_err());
        // Spelled out, the same values are read whatever their number.
        let mut spelled = String::from("l:\n");
        for _ in 0..10_000 {
            spelled.push_str("- xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n");
        }
        assert_eq!(
            parse(spelled.as_bytes()).unwrap()["l"].as_array().unwrap().len(),
            10_000
        );
    }
}
