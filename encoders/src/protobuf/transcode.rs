//! JSON ↔ protobuf for the messages of the generated schema.
//!
//! Both directions walk the schema, not generated structs: a message is its fields' numbers,
//! JSON names and types. The types whose JSON form differs from their protobuf fields are
//! transcoded as the apimachinery types marshal themselves:
//!
//! * `Time` is `{seconds, nanos}` and an RFC 3339 string in seconds (`MicroTime`: in
//!   microseconds); the zero time is an empty message and `null` (so, left out) in JSON;
//! * `IntOrString` is `{type, intVal, strVal}` and a number or a string;
//! * `Quantity` is `{string}` and the string;
//! * `RawExtension` and `FieldsV1` hold their JSON as bytes, and are that JSON inline;
//! * `bytes` (Secret `data`) is base64 in JSON; maps are repeated `{key, value}` entries,
//!   written in key order; repeated scalars are written unpacked (proto2) and read either way.
//!
//! Encoding writes what the JSON has, fields in number order, as the Go marshallers do. A
//! protobuf message cannot say whether a string was set to `""` or left out, and Go writes
//! every non-pointer string; decoding leaves empty strings out, as Go's `omitempty` does when
//! it writes the same object as JSON. Numbers and booleans are kept as they are on the wire,
//! because a pointer's zero (`runAsUser: 0`) means something. Fields the schema does not know
//! are skipped when decoding and ignored when encoding (`apiVersion` and `kind` travel in the
//! envelope, not in the message).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use prost::encoding::{WireType, decode_varint, encode_varint, encoded_len_varint};
use serde_json::{Map, Number, Value};

use super::schema::{Field, MESSAGES, Message, Type};

/// A JSON value that does not fit the schema, or protobuf bytes that are not a message of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranscodeError(pub String);

impl std::fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TranscodeError {}

fn err<T>(what: impl Into<String>) -> Result<T, TranscodeError> {
    Err(TranscodeError(what.into()))
}

/// Seconds from 0001-01-01 to 1970-01-01: Go's zero `time.Time` in Unix seconds.
const GO_ZERO_UNIX: i64 = -62_135_596_800;

fn key(out: &mut Vec<u8>, tag: u32, wire: WireType) {
    encode_varint(u64::from(tag << 3 | wire as u32), out);
}

fn put_len(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    key(out, tag, WireType::LengthDelimited);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, tag: u32, value: u64) {
    key(out, tag, WireType::Varint);
    encode_varint(value, out);
}

/// Writes `object` as message `message` (without a length prefix) to `out`.
pub(crate) fn encode_message(
    message: &Message,
    object: &Map<String, Value>,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    for field in message.fields {
        if field.inline {
            let Type::Msg(sub) = field.ty else {
                return err(format!("inline field {} is not a message", field.json));
            };
            let mut inner = Vec::new();
            encode_message(&MESSAGES[usize::from(sub)], object, &mut inner)?;
            put_len(out, field.tag, &inner);
            continue;
        }
        let Some(value) = object.get(field.json) else {
            continue;
        };
        encode_field(message, field, value, out)?;
    }
    Ok(())
}

fn encode_field(
    message: &Message,
    field: &Field,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    if value.is_null() {
        return Ok(());
    }
    if field.repeated {
        let Value::Array(items) = value else {
            return err(format!("{}.{}: expected a list", message.name, field.json));
        };
        for item in items {
            encode_value(message, field, &field.ty, item, out)?;
        }
        return Ok(());
    }
    encode_value(message, field, &field.ty, value, out)
}

fn encode_value(
    message: &Message,
    field: &Field,
    ty: &Type,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    let tag = field.tag;
    let wrong = |expected: &str| {
        err(format!(
            "{}.{}: expected {expected}, found {value}",
            message.name, field.json
        ))
    };
    match (ty, value) {
        (Type::Str, Value::String(s)) => put_len(out, tag, s.as_bytes()),
        (Type::Str, _) => return wrong("a string"),
        (Type::Bool, Value::Bool(b)) => put_varint(out, tag, u64::from(*b)),
        (Type::Bool, _) => return wrong("a boolean"),
        (Type::I32, Value::Number(n)) => match n.as_i64().and_then(|n| i32::try_from(n).ok()) {
            // Negative int32s are sign-extended to ten bytes, as protobuf requires.
            Some(n) => put_varint(out, tag, i64::from(n) as u64),
            None => return wrong("a 32-bit integer"),
        },
        (Type::I64, Value::Number(n)) => match n.as_i64() {
            Some(n) => put_varint(out, tag, n as u64),
            None => return wrong("a 64-bit integer"),
        },
        (Type::I32 | Type::I64, _) => return wrong("an integer"),
        (Type::Bytes, Value::String(s)) => match STANDARD.decode(s) {
            Ok(bytes) => put_len(out, tag, &bytes),
            Err(_) => return wrong("base64"),
        },
        (Type::Bytes, _) => return wrong("a base64 string"),
        (Type::Msg(sub), Value::Object(object)) => {
            let mut inner = Vec::new();
            encode_message(&MESSAGES[usize::from(*sub)], object, &mut inner)?;
            put_len(out, tag, &inner);
        }
        (Type::Msg(_), _) => return wrong("an object"),
        (Type::Map(value_ty), Value::Object(map)) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                let v = &map[k];
                if v.is_null() {
                    continue;
                }
                let mut entry = Vec::new();
                put_len(&mut entry, 1, k.as_bytes());
                let entry_field = Field {
                    json: field.json,
                    tag: 2,
                    ty: Type::Str,
                    repeated: false,
                    inline: false,
                };
                encode_value(message, &entry_field, value_ty, v, &mut entry)?;
                put_len(out, tag, &entry);
            }
        }
        (Type::Map(_), _) => return wrong("an object"),
        (Type::Time | Type::MicroTime, Value::String(s)) => {
            let Ok(ts) = s.parse::<jiff::Timestamp>() else {
                return wrong("an RFC 3339 time");
            };
            let mut inner = Vec::new();
            put_varint(&mut inner, 1, ts.as_second() as u64);
            let nanos = if matches!(ty, Type::Time) {
                0
            } else {
                ts.subsec_nanosecond() / 1000 * 1000
            };
            put_varint(&mut inner, 2, i64::from(nanos) as u64);
            put_len(out, tag, &inner);
        }
        (Type::Time | Type::MicroTime, _) => return wrong("an RFC 3339 time"),
        (Type::IntOrString, Value::Number(n)) => match n.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => {
                let mut inner = Vec::new();
                put_varint(&mut inner, 1, 0);
                put_varint(&mut inner, 2, i64::from(n) as u64);
                put_len(&mut inner, 3, b"");
                put_len(out, tag, &inner);
            }
            None => return wrong("a 32-bit integer or a string"),
        },
        (Type::IntOrString, Value::String(s)) => {
            let mut inner = Vec::new();
            put_varint(&mut inner, 1, 1);
            put_varint(&mut inner, 2, 0);
            put_len(&mut inner, 3, s.as_bytes());
            put_len(out, tag, &inner);
        }
        (Type::IntOrString, _) => return wrong("an integer or a string"),
        (Type::Quantity, Value::String(s)) => {
            let mut inner = Vec::new();
            put_len(&mut inner, 1, s.as_bytes());
            put_len(out, tag, &inner);
        }
        (Type::Quantity, Value::Number(n)) => {
            let mut inner = Vec::new();
            put_len(&mut inner, 1, n.to_string().as_bytes());
            put_len(out, tag, &inner);
        }
        (Type::Quantity, _) => return wrong("a quantity"),
        (Type::RawExtension | Type::FieldsV1, v) => {
            let raw = serde_json::to_vec(v).map_err(|e| TranscodeError(e.to_string()))?;
            let mut inner = Vec::new();
            put_len(&mut inner, 1, &raw);
            put_len(out, tag, &inner);
        }
    }
    Ok(())
}

/// One field read from a message: its value (fixed-width ones, which no schema type uses, are
/// only skipped).
pub(crate) enum Raw<'a> {
    Varint(u64),
    Fixed64,
    Fixed32,
    Len(&'a [u8]),
}

/// Reads the fields of one message in order.
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Fields { rest: bytes }
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Raw<'a>), TranscodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = (|| {
            let key = decode_varint(&mut self.rest).map_err(|e| TranscodeError(e.to_string()))?;
            let tag =
                u32::try_from(key >> 3).map_err(|_| TranscodeError("field number out of range".into()))?;
            if tag == 0 {
                return err("field number 0");
            }
            let raw = match key & 7 {
                0 => Raw::Varint(decode_varint(&mut self.rest).map_err(|e| TranscodeError(e.to_string()))?),
                1 => {
                    let Some((_, tail)) = self.rest.split_first_chunk::<8>() else {
                        return err("truncated fixed64");
                    };
                    self.rest = tail;
                    Raw::Fixed64
                }
                2 => {
                    let len = decode_varint(&mut self.rest).map_err(|e| TranscodeError(e.to_string()))?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    if len > self.rest.len() {
                        return err("truncated length-delimited field");
                    }
                    let (head, tail) = self.rest.split_at(len);
                    self.rest = tail;
                    Raw::Len(head)
                }
                5 => {
                    let Some((_, tail)) = self.rest.split_first_chunk::<4>() else {
                        return err("truncated fixed32");
                    };
                    self.rest = tail;
                    Raw::Fixed32
                }
                w => return err(format!("unsupported wire type {w}")),
            };
            Ok((tag, raw))
        })();
        if item.is_err() {
            self.rest = &[];
        }
        Some(item)
    }
}

/// Reads message `message` from `bytes` into a JSON object.
pub(crate) fn decode_message(message: &Message, bytes: &[u8]) -> Result<Map<String, Value>, TranscodeError> {
    let mut object = Map::new();
    decode_into(message, bytes, &mut object)?;
    Ok(object)
}

fn decode_into(
    message: &Message,
    bytes: &[u8],
    object: &mut Map<String, Value>,
) -> Result<(), TranscodeError> {
    for item in Fields::new(bytes) {
        let (tag, raw) = item?;
        let Some(field) = message.field_by_tag(tag) else {
            continue;
        };
        if field.inline {
            let (Type::Msg(sub), Raw::Len(inner)) = (&field.ty, raw) else {
                return err(format!("{}.{}: not a message", message.name, field.json));
            };
            decode_into(&MESSAGES[usize::from(*sub)], inner, object)?;
            continue;
        }
        if field.repeated {
            // Packed repeated scalars: one length-delimited run of values.
            if let (Type::I32 | Type::I64 | Type::Bool, Raw::Len(run)) = (&field.ty, &raw) {
                let mut run: &[u8] = run;
                while !run.is_empty() {
                    let v = decode_varint(&mut run).map_err(|e| TranscodeError(e.to_string()))?;
                    let value = decode_value(message, field, &field.ty, Raw::Varint(v))?;
                    push(object, field.json, value);
                }
                continue;
            }
            if let Some(value) = decode_value(message, field, &field.ty, raw)? {
                push(object, field.json, Some(value));
            }
            continue;
        }
        match (&field.ty, raw) {
            (Type::Map(value_ty), Raw::Len(entry)) => {
                let (mut k, mut v) = (String::new(), None);
                for item in Fields::new(entry) {
                    match item? {
                        (1, Raw::Len(s)) => k = utf8(message, field, s)?.to_owned(),
                        (2, raw) => v = decode_value(message, field, value_ty, raw)?,
                        _ => {}
                    }
                }
                let map = object
                    .entry(field.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    // A map value Go would write as "" is still a value of the map.
                    map.insert(k, v.unwrap_or_else(|| empty(value_ty)));
                }
            }
            (ty, raw) => match decode_value(message, field, ty, raw)? {
                Some(value) => {
                    object.insert(field.json.to_owned(), value);
                }
                None => {
                    object.remove(field.json);
                }
            },
        }
    }
    Ok(())
}

/// A map value that was left off the wire: the zero value of its type.
fn empty(ty: &Type) -> Value {
    match ty {
        Type::Str | Type::Bytes | Type::Quantity => Value::String(String::new()),
        Type::Msg(_) => Value::Object(Map::new()),
        Type::IntOrString | Type::I32 | Type::I64 => Value::from(0),
        Type::Bool => Value::Bool(false),
        _ => Value::Null,
    }
}

fn push(object: &mut Map<String, Value>, json: &str, value: Option<Value>) {
    let list = object.entry(json).or_insert_with(|| Value::Array(Vec::new()));
    if let (Value::Array(list), Some(value)) = (list, value) {
        list.push(value);
    }
}

fn utf8<'a>(message: &Message, field: &Field, bytes: &'a [u8]) -> Result<&'a str, TranscodeError> {
    std::str::from_utf8(bytes).or_else(|_| err(format!("{}.{}: not UTF-8", message.name, field.json)))
}

/// One value; `None` for what JSON leaves out (an empty string, the zero time).
fn decode_value(
    message: &Message,
    field: &Field,
    ty: &Type,
    raw: Raw<'_>,
) -> Result<Option<Value>, TranscodeError> {
    let wrong = || err(format!("{}.{}: wrong wire type", message.name, field.json));
    Ok(match (ty, raw) {
        (Type::Str, Raw::Len(s)) => {
            let s = utf8(message, field, s)?;
            // In a list every element counts, even an empty one.
            (field.repeated || !s.is_empty()).then(|| Value::String(s.to_owned()))
        }
        (Type::Bool, Raw::Varint(v)) => Some(Value::Bool(v != 0)),
        (Type::I32, Raw::Varint(v)) => Some(Value::from(v as i64 as i32)),
        (Type::I64, Raw::Varint(v)) => Some(Value::from(v as i64)),
        (Type::Bytes, Raw::Len(b)) => Some(Value::String(STANDARD.encode(b))),
        (Type::Msg(sub), Raw::Len(b)) => {
            Some(Value::Object(decode_message(&MESSAGES[usize::from(*sub)], b)?))
        }
        (Type::Time | Type::MicroTime, Raw::Len(b)) => {
            let (mut seconds, mut nanos) = (0i64, 0i32);
            for item in Fields::new(b) {
                match item? {
                    (1, Raw::Varint(v)) => seconds = v as i64,
                    (2, Raw::Varint(v)) => nanos = v as i64 as i32,
                    _ => {}
                }
            }
            if b.is_empty() || (seconds == GO_ZERO_UNIX && nanos == 0) {
                return Ok(None);
            }
            let Ok(ts) = jiff::Timestamp::new(seconds, nanos) else {
                return err(format!("{}.{}: time out of range", message.name, field.json));
            };
            let text = if matches!(ty, Type::Time) {
                format!("{:.0}", ts)
            } else {
                format!("{:.6}", ts)
            };
            Some(Value::String(text))
        }
        (Type::IntOrString, Raw::Len(b)) => {
            let (mut kind, mut int, mut string) = (0u64, 0i32, String::new());
            for item in Fields::new(b) {
                match item? {
                    (1, Raw::Varint(v)) => kind = v,
                    (2, Raw::Varint(v)) => int = v as i64 as i32,
                    (3, Raw::Len(s)) => string = utf8(message, field, s)?.to_owned(),
                    _ => {}
                }
            }
            Some(if kind == 1 {
                Value::String(string)
            } else {
                Value::Number(Number::from(int))
            })
        }
        (Type::Quantity, Raw::Len(b)) => {
            let mut string = String::new();
            for item in Fields::new(b) {
                if let (1, Raw::Len(s)) = item? {
                    string = utf8(message, field, s)?.to_owned();
                }
            }
            Some(Value::String(string))
        }
        (Type::RawExtension | Type::FieldsV1, Raw::Len(b)) => {
            let mut raw: &[u8] = &[];
            for item in Fields::new(b) {
                if let (1, Raw::Len(r)) = item? {
                    raw = r;
                }
            }
            if raw.is_empty() {
                return Ok(None);
            }
            match serde_json::from_slice(raw) {
                Ok(v) => Some(v),
                Err(e) => return err(format!("{}.{}: not JSON: {e}", message.name, field.json)),
            }
        }
        (Type::Map(_), _) => return err(format!("{}.{}: a map inside a list", message.name, field.json)),
        _ => return wrong(),
    })
}

/// Bytes a length-delimited field of `len` bytes takes, with a one-byte key.
pub(crate) fn len_field_size(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}
