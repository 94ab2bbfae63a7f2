//! Kubernetes protobuf: the `k8s\0` envelope, objects transcoded from their JSON once per
//! version, and the resourceVersion restamped without re-encoding.
//!
//! A protobuf body is the four bytes `k8s\0` and a `runtime.Unknown`: `typeMeta` (field 1:
//! `apiVersion`, `kind`), `raw` (field 2: the object's message), `contentEncoding` and
//! `contentType` (fields 3 and 4, empty; the apiserver writes them so). The object's message
//! is what [`JsonCodec`](crate::JsonCodec) makes, once, for
//! [`WireFormat::Protobuf`](watchcache_core::WireFormat::Protobuf), and every GET, LIST item
//! and watch frame shares it: the envelope around it is a few bytes written per response.
//!
//! The schema (field numbers, types, JSON names) is generated from the k8s-pb and
//! k8s-openapi crates by `tests/protobuf_schema.rs` into `generated.rs`.

mod generated;
mod nulls;
pub(crate) mod schema;
mod transcode;

use std::ops::Range;

use bytes::BufMut;
use prost::encoding::{decode_varint, encode_varint, encoded_len_varint};
use serde_json::{Map, Value};
use watchcache_core::{Encoding, Revision};

pub use transcode::TranscodeError;
use transcode::{Fields, Raw, len_field_size};

/// The protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// `contentEncoding` and `contentType` of the envelope, both empty, as the apiserver writes
/// them after `raw`.
pub const ENVELOPE_SUFFIX: &[u8] = &[0x1a, 0x00, 0x22, 0x00];

/// Whether protobuf messages exist for OpenAPI definition `definition`
/// (`io.k8s.api.core.v1.Pod`).
pub fn has_message(definition: &str) -> bool {
    schema::message(definition).is_some()
}

/// The schema's own name of message `definition`, if the schema has it: what
/// [`JsonCodec::with_protobuf`](crate::JsonCodec::with_protobuf) and
/// [`ResourceInfo::with_protobuf`](crate::ResourceInfo::with_protobuf) take.
pub fn message_name(definition: &str) -> Option<&'static str> {
    schema::message(definition).map(|m| m.name)
}

fn message(definition: &str) -> Result<&'static schema::Message, TranscodeError> {
    schema::message(definition).ok_or_else(|| TranscodeError(format!("no protobuf message for {definition}")))
}

/// `object` (JSON) as protobuf message `definition`, without an envelope: what
/// [`encode_json_text`] makes of its text.
pub fn encode_json(definition: &str, object: &Map<String, Value>) -> Result<Vec<u8>, TranscodeError> {
    let text = serde_json::to_vec(object).map_err(|e| TranscodeError(e.to_string()))?;
    encode_json_text(definition, &text)
}

/// The JSON text `json` (an object) as protobuf message `definition`, without an envelope,
/// read in one pass with no `serde_json::Value` in between (what [`JsonCodec`](crate::JsonCodec)
/// makes an object's protobuf encoding with).
pub fn encode_json_text(definition: &str, json: &[u8]) -> Result<Vec<u8>, TranscodeError> {
    let mut out = Vec::with_capacity(json.len());
    transcode::encode_json_text(message(definition)?, json, &mut out)?;
    Ok(out)
}

/// Rewrites `object` (JSON of message `definition`) as Go reads it into the built-in types:
/// a `null` map value or list element becomes its type's zero value (`""`, `0`, `{}`). A
/// definition without a message leaves the object as it is.
pub fn zero_nulls(definition: &str, object: &mut Map<String, Value>) {
    if let Some(m) = schema::message(definition) {
        nulls::zero_nulls(m, object);
    }
}

/// Protobuf message `definition` as JSON.
pub fn decode_json(definition: &str, bytes: &[u8]) -> Result<Map<String, Value>, TranscodeError> {
    transcode::decode_message(message(definition)?, bytes)
}

/// The encoding of an object's message: its bytes, with the resourceVersion located when the
/// object has one (in `metadata`, field 1, as `resourceVersion`, field 6).
pub fn object_encoding(bytes: Vec<u8>) -> Encoding {
    let at = locate_revision(&bytes);
    match at {
        Some((length_at, revision_at)) => {
            Encoding::with_nested_revision_at(bytes.into(), revision_at, length_at)
        }
        None => Encoding::new(bytes.into()),
    }
}

/// Where `metadata`'s length prefix and the resourceVersion's digits sit in a message.
fn locate_revision(bytes: &[u8]) -> Option<(Range<usize>, Range<usize>)> {
    let at = |rest: &[u8]| bytes.len() - rest.len();
    let mut fields = Fields::new(bytes);
    loop {
        let before = at(fields.rest());
        let (tag, raw) = fields.next()?.ok()?;
        if let (1, Raw::Len(meta)) = (tag, raw) {
            let mut rest = &bytes[before + 1..];
            decode_varint(&mut rest).ok()?;
            let length_at = before + 1..at(rest);
            let meta_start = length_at.end;
            let mut meta_fields = Fields::new(meta);
            loop {
                let (tag, raw) = meta_fields.next()?.ok()?;
                if let (6, Raw::Len(rv)) = (tag, raw) {
                    // A revision has at most 20 digits: its length prefix is one byte.
                    let end = meta_start + (meta.len() - meta_fields.rest().len());
                    let start = end - rv.len();
                    return (rv.len() < 128 && !rv.is_empty()).then_some((length_at, start..end));
                }
            }
        }
    }
}

/// The length of `encoding` stamped with `revision` instead of `original`.
pub fn restamped_len(encoding: &Encoding, original: Revision, revision: Revision) -> usize {
    match restamp_plan(encoding, original, revision) {
        Some(plan) => plan.len,
        None => encoding.bytes().len(),
    }
}

struct Plan {
    length_at: Range<usize>,
    revision_at: Range<usize>,
    meta_len: u64,
    digits: itoa::Buffer,
    revision: u64,
    len: usize,
}

fn restamp_plan(encoding: &Encoding, original: Revision, revision: Revision) -> Option<Plan> {
    if original == revision {
        return None;
    }
    let (length_at, revision_at) = (encoding.length_at()?, encoding.revision_at()?);
    let bytes = encoding.bytes();
    let old_meta = decode_varint(&mut &bytes[length_at.clone()]).ok()?;
    let mut digits = itoa::Buffer::new();
    let new_digits = digits.format(revision.get()).len() as u64;
    let meta_len = old_meta - revision_at.len() as u64 + new_digits;
    let len = bytes.len() - length_at.len() + encoded_len_varint(meta_len) - revision_at.len()
        + new_digits as usize;
    Some(Plan {
        length_at,
        revision_at,
        meta_len,
        digits,
        revision: revision.get(),
        len,
    })
}

/// Writes `encoding` stamped with `revision` (it was made at `original`) to `out`, copying
/// around the resourceVersion and `metadata`'s length prefix.
pub fn write_restamped(encoding: &Encoding, original: Revision, revision: Revision, out: &mut impl BufMut) {
    let bytes = encoding.bytes();
    let Some(mut plan) = restamp_plan(encoding, original, revision) else {
        out.put_slice(bytes);
        return;
    };
    out.put_slice(&bytes[..plan.length_at.start]);
    let mut prefix = Vec::with_capacity(10);
    encode_varint(plan.meta_len, &mut prefix);
    out.put_slice(&prefix);
    out.put_slice(&bytes[plan.length_at.end..plan.revision_at.start - 1]);
    let digits = plan.digits.format(plan.revision);
    out.put_u8(digits.len() as u8);
    out.put_slice(digits.as_bytes());
    out.put_slice(&bytes[plan.revision_at.end..]);
}

/// The start of an envelope whose `raw` is `raw_len` bytes: magic, `typeMeta`, and `raw`'s
/// key and length. The raw bytes and [`ENVELOPE_SUFFIX`] follow.
pub fn envelope_prefix(api_version: &str, kind: &str, raw_len: usize, out: &mut impl BufMut) {
    out.put_slice(MAGIC);
    let type_meta_len = len_field_size(api_version.len()) + len_field_size(kind.len());
    let mut head = Vec::with_capacity(type_meta_len + 24);
    head.push(0x0a);
    encode_varint(type_meta_len as u64, &mut head);
    head.push(0x0a);
    encode_varint(api_version.len() as u64, &mut head);
    head.extend_from_slice(api_version.as_bytes());
    head.push(0x12);
    encode_varint(kind.len() as u64, &mut head);
    head.extend_from_slice(kind.as_bytes());
    head.push(0x12);
    encode_varint(raw_len as u64, &mut head);
    out.put_slice(&head);
}

/// The whole envelope of `raw`.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 64);
    envelope_prefix(api_version, kind, raw.len(), &mut out);
    out.extend_from_slice(raw);
    out.extend_from_slice(ENVELOPE_SUFFIX);
    out
}

/// The length of [`envelope`] of `raw_len` bytes.
pub fn envelope_len(api_version: &str, kind: &str, raw_len: usize) -> usize {
    let type_meta_len = len_field_size(api_version.len()) + len_field_size(kind.len());
    MAGIC.len() + len_field_size(type_meta_len) + len_field_size(raw_len) + ENVELOPE_SUFFIX.len()
}

/// An envelope read from a body.
#[derive(Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: String,
    /// `typeMeta.kind`.
    pub kind: String,
    /// The object's message.
    pub raw: &'a [u8],
}

/// Reads the envelope of a protobuf body.
pub fn open_envelope(body: &[u8]) -> Result<Envelope<'_>, TranscodeError> {
    let Some(unknown) = body.strip_prefix(MAGIC) else {
        return Err(TranscodeError("a protobuf body starts with k8s\\0".into()));
    };
    let mut envelope = Envelope {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
    };
    for item in Fields::new(unknown) {
        match item? {
            (1, Raw::Len(type_meta)) => {
                for item in Fields::new(type_meta) {
                    let text = |b: &[u8]| {
                        String::from_utf8(b.to_vec())
                            .map_err(|_| TranscodeError("typeMeta is not UTF-8".into()))
                    };
                    match item? {
                        (1, Raw::Len(v)) => envelope.api_version = text(v)?,
                        (2, Raw::Len(k)) => envelope.kind = text(k)?,
                        _ => {}
                    }
                }
            }
            (2, Raw::Len(raw)) => envelope.raw = raw,
            (3, Raw::Len(encoding)) if !encoding.is_empty() => {
                return Err(TranscodeError("content encodings are not supported".into()));
            }
            _ => {}
        }
    }
    Ok(envelope)
}

/// Appends the start of a watch frame: a 4-byte big-endian length, then a `WatchEvent` of
/// type `event_type` whose `object` is a `RawExtension` holding an envelope of `raw_len` bytes
/// of raw, up to that raw. The raw bytes and [`ENVELOPE_SUFFIX`] follow.
pub fn write_watch_frame_head(
    event_type: &str,
    api_version: &str,
    kind: &str,
    raw_len: usize,
    out: &mut impl BufMut,
) {
    let envelope = envelope_len(api_version, kind, raw_len);
    let extension = len_field_size(envelope);
    let event = len_field_size(event_type.len()) + len_field_size(extension);
    let mut head = Vec::with_capacity(32);
    head.extend_from_slice(&u32::try_from(event).unwrap_or(u32::MAX).to_be_bytes());
    head.push(0x0a);
    encode_varint(event_type.len() as u64, &mut head);
    head.extend_from_slice(event_type.as_bytes());
    head.push(0x12);
    encode_varint(extension as u64, &mut head);
    head.push(0x0a);
    encode_varint(envelope as u64, &mut head);
    out.put_slice(&head);
    envelope_prefix(api_version, kind, raw_len, out);
}

/// Appends a whole watch frame around `raw`.
pub fn write_watch_frame(event_type: &str, api_version: &str, kind: &str, raw: &[u8], out: &mut impl BufMut) {
    write_watch_frame_head(event_type, api_version, kind, raw.len(), out);
    out.put_slice(raw);
    out.put_slice(ENVELOPE_SUFFIX);
}
