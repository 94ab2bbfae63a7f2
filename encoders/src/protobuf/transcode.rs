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
//! * `bytes` (Secret `data`) is base64 in JSON; maps are repeated `{key, value}` entries;
//!   repeated scalars are written unpacked (proto2) and read either way.
//!
//! Encoding reads the JSON text once (serde seeds that write as they read; no `Value` tree)
//! and writes what it has, in its key order: any order is a valid message, and Go's decoder
//! and ours read them alike. A protobuf message cannot say whether a string was set to `""`
//! or left out, and Go writes every non-pointer string; decoding leaves empty strings out, as
//! Go's `omitempty` does when it writes the same object as JSON. Numbers and booleans are
//! kept as they are on the wire, because a pointer's zero (`runAsUser: 0`) means something.
//! Fields the schema does not know are skipped when decoding and ignored when encoding
//! (`apiVersion` and `kind` travel in the envelope, not in the message).

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
    super::nulls::zero(ty)
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

/// Writes the JSON text `json` (an object) as message `message`, reading it once with no
/// `Value` tree in between.
pub(crate) fn encode_json_text(
    message: &Message,
    json: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    use serde::de::DeserializeSeed as _;
    let mut de = serde_json::Deserializer::from_slice(json);
    let written = text::FieldSeed {
        message,
        field: None,
        ty: &Type::Msg(u16::MAX),
        root: Some(message),
        element: false,
        out,
    }
    .deserialize(&mut de)
    .map_err(|e| TranscodeError(e.to_string()))?;
    de.end().map_err(|e| TranscodeError(e.to_string()))?;
    if !written {
        return err(format!("{}: expected an object", message.name));
    }
    Ok(())
}

/// The serde side of [`encode_json_text`]: a seed per value, writing as it reads.
mod text {
    use std::borrow::Cow;
    use std::fmt;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use prost::encoding::{WireType, encode_varint};
    use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::value::RawValue;

    use super::{Field, MESSAGES, Message, Type, key};

    /// An object's key, borrowed from the JSON text unless it has escapes.
    struct Key<'de>(Cow<'de, str>);

    impl<'de> de::Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct KeyVisitor;

            impl<'de> Visitor<'de> for KeyVisitor {
                type Value = Key<'de>;

                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a key")
                }

                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Borrowed(s)))
                }

                fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(s.to_owned())))
                }
            }

            d.deserialize_str(KeyVisitor)
        }
    }

    /// Writes the zero value of a list element of type `ty` as field `tag`: what Go writes for
    /// an element it read from `null`.
    fn zero_element(ty: &Type, tag: u32, out: &mut Vec<u8>) {
        match ty {
            Type::Bool | Type::I32 | Type::I64 => {
                key(out, tag, WireType::Varint);
                out.push(0);
            }
            // Strings, bytes and messages (an empty Quantity, IntOrString, Time or raw JSON
            // too): an empty length-delimited field.
            _ => {
                key(out, tag, WireType::LengthDelimited);
                out.push(0);
            }
        }
    }

    /// Writes the key of field `tag` and a one-byte length to fill in; where the content starts.
    fn open(out: &mut Vec<u8>, tag: u32) -> usize {
        key(out, tag, WireType::LengthDelimited);
        out.push(0);
        out.len()
    }

    /// Fills in the length of the content started at `start`, widening it past one byte.
    fn close(out: &mut Vec<u8>, start: usize) {
        let len = out.len() - start;
        if len < 0x80 {
            out[start - 1] = len as u8;
            return;
        }
        let mut prefix = Vec::with_capacity(10);
        encode_varint(len as u64, &mut prefix);
        out[start - 1] = prefix[0];
        out.splice(start..start, prefix[1..].iter().copied());
    }

    /// One JSON value of field `field` (of type `ty`) of `message`, written to `out`. Yields
    /// whether anything was written (`null` writes nothing). With `root`, the value is that
    /// message itself, written without a key.
    pub(super) struct FieldSeed<'a> {
        pub(super) message: &'a Message,
        pub(super) field: Option<&'a Field>,
        pub(super) ty: &'a Type,
        pub(super) root: Option<&'a Message>,
        /// An element of a repeated field's list, rather than the field's whole value.
        pub(super) element: bool,
        pub(super) out: &'a mut Vec<u8>,
    }

    impl FieldSeed<'_> {
        /// A value that is not a list: refused for a repeated field, whose value is a list.
        fn single<E: de::Error>(&self) -> Result<(), E> {
            match self.field {
                Some(f) if f.repeated && !self.element => Err(self.wrong("a list")),
                _ => Ok(()),
            }
        }

        fn tag(&self) -> u32 {
            self.field.map_or(2, |f| f.tag)
        }

        fn wrong<E: de::Error>(&self, expected: &str) -> E {
            E::custom(format!(
                "{}.{}: expected {expected}",
                self.message.name,
                self.field.map_or("", |f| f.json)
            ))
        }

        fn put_len(&mut self, bytes: &[u8]) {
            key(self.out, self.tag(), WireType::LengthDelimited);
            encode_varint(bytes.len() as u64, self.out);
            self.out.extend_from_slice(bytes);
        }

        fn put_varint(&mut self, v: u64) {
            key(self.out, self.tag(), WireType::Varint);
            encode_varint(v, self.out);
        }

        fn int<E: de::Error>(&mut self, v: i128) -> Result<bool, E> {
            match self.ty {
                Type::I32 => match i32::try_from(v) {
                    Ok(n) => self.put_varint(i64::from(n) as u64),
                    Err(_) => return Err(self.wrong("a 32-bit integer")),
                },
                Type::I64 => match i64::try_from(v) {
                    Ok(n) => self.put_varint(n as u64),
                    Err(_) => return Err(self.wrong("a 64-bit integer")),
                },
                Type::IntOrString => match i32::try_from(v) {
                    Ok(n) => {
                        let start = open(self.out, self.tag());
                        key(self.out, 1, WireType::Varint);
                        encode_varint(0, self.out);
                        key(self.out, 2, WireType::Varint);
                        encode_varint(i64::from(n) as u64, self.out);
                        key(self.out, 3, WireType::LengthDelimited);
                        self.out.push(0);
                        close(self.out, start);
                    }
                    Err(_) => return Err(self.wrong("a 32-bit integer or a string")),
                },
                Type::Quantity => self.quantity(&v.to_string()),
                _ => return Err(self.wrong("no number")),
            }
            Ok(true)
        }

        fn quantity(&mut self, s: &str) {
            let start = open(self.out, self.tag());
            key(self.out, 1, WireType::LengthDelimited);
            encode_varint(s.len() as u64, self.out);
            self.out.extend_from_slice(s.as_bytes());
            close(self.out, start);
        }
    }

    impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
        type Value = bool;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            if let Type::RawExtension | Type::FieldsV1 = self.ty {
                let raw: &RawValue = de::Deserialize::deserialize(d)?;
                if raw.get() == "null" {
                    return Ok(false);
                }
                let this = self;
                let start = open(this.out, this.tag());
                key(this.out, 1, WireType::LengthDelimited);
                encode_varint(raw.get().len() as u64, this.out);
                this.out.extend_from_slice(raw.get().as_bytes());
                close(this.out, start);
                return Ok(true);
            }
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for FieldSeed<'_> {
        type Value = bool;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a value of {}", self.message.name)
        }

        fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }

        fn visit_none<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }

        fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<bool, E> {
            self.single()?;
            match self.ty {
                Type::Bool => self.put_varint(u64::from(v)),
                _ => return Err(self.wrong("no boolean")),
            }
            Ok(true)
        }

        fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<bool, E> {
            self.single()?;
            self.int(i128::from(v))
        }

        fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<bool, E> {
            self.single()?;
            self.int(i128::from(v))
        }

        fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<bool, E> {
            self.single()?;
            match (self.ty, serde_json::Number::from_f64(v)) {
                (Type::Quantity, Some(n)) => {
                    self.quantity(&n.to_string());
                    Ok(true)
                }
                _ => Err(self.wrong("an integer")),
            }
        }

        fn visit_str<E: de::Error>(mut self, s: &str) -> Result<bool, E> {
            self.single()?;
            match self.ty {
                Type::Str => self.put_len(s.as_bytes()),
                Type::Bytes => match STANDARD.decode(s) {
                    Ok(bytes) => self.put_len(&bytes),
                    Err(_) => return Err(self.wrong("base64")),
                },
                Type::Time | Type::MicroTime => {
                    let Ok(ts) = s.parse::<jiff::Timestamp>() else {
                        return Err(self.wrong("an RFC 3339 time"));
                    };
                    let nanos = match self.ty {
                        Type::Time => 0,
                        _ => ts.subsec_nanosecond() / 1000 * 1000,
                    };
                    let start = open(self.out, self.tag());
                    key(self.out, 1, WireType::Varint);
                    encode_varint(ts.as_second() as u64, self.out);
                    key(self.out, 2, WireType::Varint);
                    encode_varint(i64::from(nanos) as u64, self.out);
                    close(self.out, start);
                }
                Type::IntOrString => {
                    let start = open(self.out, self.tag());
                    key(self.out, 1, WireType::Varint);
                    encode_varint(1, self.out);
                    key(self.out, 2, WireType::Varint);
                    encode_varint(0, self.out);
                    key(self.out, 3, WireType::LengthDelimited);
                    encode_varint(s.len() as u64, self.out);
                    self.out.extend_from_slice(s.as_bytes());
                    close(self.out, start);
                }
                Type::Quantity => self.quantity(s),
                _ => return Err(self.wrong("no string")),
            }
            Ok(true)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            if !self.field.is_some_and(|f| f.repeated) || self.root.is_some() || self.element {
                return Err(self.wrong("no list"));
            }
            let field = self.field;
            while let Some(written) = seq.next_element_seed(FieldSeed {
                message: self.message,
                field,
                ty: self.ty,
                root: None,
                element: true,
                out: &mut *self.out,
            })? {
                if !written {
                    // `null` in a list is the element's zero value, as Go decodes it.
                    zero_element(self.ty, field.map_or(2, |f| f.tag), self.out);
                }
            }
            Ok(true)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            self.single()?;
            let FieldSeed {
                message,
                field,
                ty,
                root,
                out,
                ..
            } = self;
            if let Type::Map(value_ty) = ty {
                let tag = field.map_or(2, |f| f.tag);
                while let Some(k) = map.next_key::<Key<'de>>()?.map(|k| k.0) {
                    let entry_start = out.len();
                    let start = open(out, tag);
                    key(out, 1, WireType::LengthDelimited);
                    encode_varint(k.len() as u64, out);
                    out.extend_from_slice(k.as_bytes());
                    let value_field = Field {
                        json: field.map_or("", |f| f.json),
                        tag: 2,
                        ty: Type::Str,
                        repeated: false,
                        inline: false,
                    };
                    let written = map.next_value_seed(FieldSeed {
                        message,
                        field: Some(&value_field),
                        ty: value_ty,
                        root: None,
                        element: false,
                        out: &mut *out,
                    })?;
                    if !written && matches!(value_ty, Type::Map(_)) {
                        // No zero value to stand for (a map cannot be a map's value in the
                        // schema): the entry is left out.
                        out.truncate(entry_start);
                        continue;
                    }
                    // A `null` value (nothing written) is the entry with its value left out:
                    // the zero value, as Go decodes `null` into a map's value.
                    close(out, start);
                }
                return Ok(true);
            }
            let sub = match (root, ty) {
                (Some(m), _) => m,
                (None, Type::Msg(i)) => &MESSAGES[usize::from(*i)],
                (None, _) => {
                    return Err(de::Error::custom(format!(
                        "{}.{}: expected no object",
                        message.name,
                        field.map_or("", |f| f.json)
                    )));
                }
            };
            let start = root.is_none().then(|| open(out, field.map_or(2, |f| f.tag)));
            // Fields of structs embedded inline gather in a buffer each, written at the end.
            let mut inline: Vec<(&Field, Vec<u8>)> = sub
                .fields
                .iter()
                .filter(|f| f.inline)
                .map(|f| (f, Vec::new()))
                .collect();
            while let Some(k) = map.next_key::<Key<'de>>()?.map(|k| k.0) {
                let target = sub
                    .fields
                    .iter()
                    .find(|f| !f.inline && f.json == k)
                    .map(|f| (sub, f, None))
                    .or_else(|| {
                        inline.iter().enumerate().find_map(|(n, (f, _))| {
                            let Type::Msg(i) = f.ty else { return None };
                            let m = &MESSAGES[usize::from(i)];
                            m.fields
                                .iter()
                                .find(|g| !g.inline && g.json == k)
                                .map(|g| (m, g, Some(n)))
                        })
                    });
                match target {
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                    Some((m, f, slot)) => {
                        let out: &mut Vec<u8> = match slot {
                            Some(n) => &mut inline[n].1,
                            None => &mut *out,
                        };
                        map.next_value_seed(FieldSeed {
                            message: m,
                            field: Some(f),
                            ty: &f.ty,
                            root: None,
                            element: false,
                            out,
                        })?;
                    }
                }
            }
            for (f, bytes) in inline {
                key(out, f.tag, WireType::LengthDelimited);
                encode_varint(bytes.len() as u64, out);
                out.extend_from_slice(&bytes);
            }
            if let Some(start) = start {
                close(out, start);
            }
            Ok(true)
        }
    }
}
