//! `null` as Go reads it into the built-in types: a map value or list element that is `null`
//! is its type's zero value (`""` for a string, `{}` for a struct), not a missing entry. The
//! JSON codec rewrites an object so on ingestion, and the transcoder writes such an entry the
//! same way, so that JSON and protobuf read alike. One walk over the object beside the
//! message's schema; other nulls (a struct's field) are left as they are.

use serde_json::{Map, Value};

use super::schema::{Field, MESSAGES, Message, Type};

/// How deep the walk follows nested messages: the served types nest about 15 deep; a deeper
/// object is not theirs and is left as it is below this.
const MAX_DEPTH: usize = 64;

/// The JSON zero value of a map value or list element of type `ty`, as Go decodes `null` into
/// it; `null` for the types whose zero value JSON leaves out (times, raw JSON).
pub(crate) fn zero(ty: &Type) -> Value {
    match ty {
        Type::Str | Type::Bytes | Type::Quantity => Value::String(String::new()),
        Type::Msg(_) => Value::Object(Map::new()),
        Type::IntOrString | Type::I32 | Type::I64 => Value::from(0),
        Type::Bool => Value::Bool(false),
        Type::Map(_) | Type::Time | Type::MicroTime | Type::FieldsV1 | Type::RawExtension => Value::Null,
    }
}

/// Replaces, in `object` (a message of `message`), every `null` map value and list element by
/// its type's zero value.
pub(crate) fn zero_nulls(message: &Message, object: &mut Map<String, Value>) {
    walk_message(message, object, 0);
}

/// The field of `message` whose JSON name is `name`, looking into structs embedded inline.
fn field<'m>(message: &'m Message, name: &str) -> Option<&'m Field> {
    message.fields.iter().find_map(|f| match (&f.ty, f.inline) {
        (Type::Msg(i), true) => field(&MESSAGES[usize::from(*i)], name),
        (_, false) if f.json == name => Some(f),
        _ => None,
    })
}

fn walk_message(message: &Message, object: &mut Map<String, Value>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    for (name, value) in object.iter_mut() {
        let Some(f) = field(message, name) else {
            continue;
        };
        match value {
            Value::Array(items) if f.repeated => {
                for item in items {
                    if item.is_null() {
                        *item = zero(&f.ty);
                    } else {
                        walk_value(&f.ty, item, depth);
                    }
                }
            }
            value => walk_value(&f.ty, value, depth),
        }
    }
}

fn walk_value(ty: &Type, value: &mut Value, depth: usize) {
    match (ty, value) {
        (Type::Map(value_ty), Value::Object(entries)) => {
            for v in entries.values_mut() {
                if v.is_null() {
                    *v = zero(value_ty);
                } else {
                    walk_value(value_ty, v, depth + 1);
                }
            }
        }
        (Type::Msg(i), Value::Object(fields)) => walk_message(&MESSAGES[usize::from(*i)], fields, depth + 1),
        _ => {}
    }
}
