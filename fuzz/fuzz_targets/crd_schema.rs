//! A CustomResourceDefinition's schema, and custom resources written against it: whatever the
//! schema says (CEL rules included), compiling it either refuses it or gives a schema whose
//! pruning, defaulting and validation of any object end, within the memory and time limits
//! `run.sh` passes (`-rss_limit_mb`, `-timeout`, with inputs up to 64 KiB): a rule whose cost
//! escaped the estimate, or a walk that grows with the schema's nesting times the object's, is
//! a crash.
//!
//! The input is the schema's JSON, then the object's, then (for an update) the old object's,
//! separated by NUL bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use watchcache_api::schema::Schema;

fn object(part: Option<&[u8]>) -> Option<Map<String, Value>> {
    match serde_json::from_slice(part?) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// What the server does to a custom resource before it is stored: prune, default, validate.
fn admit(schema: &Schema, object: &mut Map<String, Value>, old: Option<&Map<String, Value>>) {
    schema.prune(object);
    // Pruning is done once: what is left is all known to the schema.
    let again = schema.prune(object);
    assert!(again.is_empty(), "a second pruning removed {again:?}");
    // Bounded: an object the defaults would grow past the budget is refused, not grown.
    if schema.apply_defaults(object).is_err() {
        return;
    }
    for error in schema.validate(object, old) {
        let _ = error.to_string();
    }
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|b| *b == 0);
    let Some(Ok(schema)) = parts.next().map(serde_json::from_slice::<Value>) else {
        return;
    };
    let schema = match Schema::compile(&schema, "spec.versions[0].schema.openAPIV3Schema") {
        Ok(s) => s,
        Err(errors) => {
            assert!(!errors.is_empty());
            for error in errors {
                let _ = error.to_string();
            }
            return;
        }
    };
    let (Some(mut new), old) = (object(parts.next()), object(parts.next())) else {
        return;
    };
    let old = old.map(|mut old| {
        admit(&schema, &mut old, None);
        old
    });
    admit(&schema, &mut new, old.as_ref());
});
