//! Watch frames, newline-delimited JSON: `{"type":"ADDED","object":…}\n`; or, for
//! [`FrameEncoder::protobuf`], Kubernetes' protobuf watch stream (`;stream=watch`): each frame
//! a 4-byte big-endian length and a `WatchEvent{type, object: RawExtension{raw: envelope}}`.
//!
//! A frame is a constant prefix, the shared object bytes and a constant suffix. When the
//! delivery's revision differs from the object's (a DELETED event, a selector exit), the
//! object's bytes are written around the recorded resourceVersion range with the new revision
//! in between, so nothing is re-encoded. Writing a frame allocates nothing of its own: it
//! copies into the buffer the caller passes (which grows if it must), once the object's JSON
//! encoding exists (made once per object version, on ingestion by [`JsonCodec`](crate::JsonCodec)).

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use watchcache_core::{Codec, CodecError, Delivery, EventKind, ObjectVersion, Revision, WireFormat};

use crate::protobuf;
use crate::resource::ResourceInfo;
use crate::status::Status;
use crate::write::{put_str, put_u64};

/// Writes watch frames for one resource.
#[derive(Clone)]
pub struct FrameEncoder {
    info: ResourceInfo,
    codec: Arc<dyn Codec>,
    format: WireFormat,
}

impl std::fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameEncoder")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

fn prefix(kind: EventKind) -> &'static [u8] {
    match kind {
        EventKind::Added => br#"{"type":"ADDED","object":"#,
        EventKind::Modified => br#"{"type":"MODIFIED","object":"#,
        EventKind::Deleted => br#"{"type":"DELETED","object":"#,
        EventKind::Bookmark => br#"{"type":"BOOKMARK","object":"#,
    }
}

const SUFFIX: &[u8] = b"}\n";

impl FrameEncoder {
    /// Frames for `info`, encoding objects with `codec` if they lack a JSON encoding.
    pub fn new(info: ResourceInfo, codec: Arc<dyn Codec>) -> Self {
        FrameEncoder {
            info,
            codec,
            format: WireFormat::Json,
        }
    }

    /// The same frames in protobuf, if the resource has a protobuf message.
    pub fn protobuf(&self) -> Option<FrameEncoder> {
        self.info.protobuf?;
        Some(FrameEncoder {
            format: WireFormat::Protobuf,
            ..self.clone()
        })
    }

    /// The wire format of the frames.
    pub fn format(&self) -> WireFormat {
        self.format
    }

    /// The resource.
    pub fn info(&self) -> &ResourceInfo {
        &self.info
    }

    /// Appends the frame for `delivery` to `out`. A corrupt object ([`ObjectVersion::corrupt`])
    /// has no encoding: its deletion goes out as its name alone, and any other event of it is
    /// [`CodecError::Corrupt`], which a watch answers with an ERROR frame naming it.
    pub fn write(&self, delivery: &Delivery<'_>, out: &mut BytesMut) -> Result<(), CodecError> {
        if let Some(object) = delivery.object.filter(|o| o.is_corrupt())
            && delivery.kind == EventKind::Deleted
        {
            self.write_deleted_name(object, delivery.revision, out);
            return Ok(());
        }
        if self.format == WireFormat::Protobuf {
            return match delivery.object {
                Some(object) => self.write_protobuf_object(delivery.kind, object, delivery.revision, out),
                None => {
                    self.write_bookmark(delivery.revision, delivery.initial_events_end, out);
                    Ok(())
                }
            };
        }
        match delivery.object {
            Some(object) => {
                let start = out.len();
                out.put_slice(prefix(delivery.kind));
                if let Err(e) = self.write_object(object, delivery.revision, out) {
                    // No half frame is left behind for the ERROR frame that follows.
                    out.truncate(start);
                    return Err(e);
                }
                out.put_slice(SUFFIX);
            }
            None => self.write_bookmark(delivery.revision, delivery.initial_events_end, out),
        }
        Ok(())
    }

    /// Appends `object`'s JSON stamped with `revision` to `out`.
    pub fn write_object(
        &self,
        object: &ObjectVersion,
        revision: Revision,
        out: &mut BytesMut,
    ) -> Result<(), CodecError> {
        let json = object.encoding(WireFormat::Json, &*self.codec)?;
        let bytes = json.bytes();
        match json.revision_at() {
            Some(at) if revision != object.revision() => {
                out.put_slice(&bytes[..at.start]);
                put_u64(out, revision.get());
                out.put_slice(&bytes[at.end..]);
            }
            _ => out.put_slice(bytes),
        }
        Ok(())
    }

    /// Appends the `metadata` object of `object`'s JSON stamped with `revision`: the part of
    /// the shared encoding its codec recorded ([`Encoding::metadata_at`]), copied as it is,
    /// so a metadata-only watch or LIST parses nothing per reader. `Ok(false)`, with nothing
    /// written, when there is no such part: a codec that records none, or a corrupt object.
    ///
    /// [`Encoding::metadata_at`]: watchcache_core::Encoding::metadata_at
    pub fn write_metadata(
        &self,
        object: &ObjectVersion,
        revision: Revision,
        out: &mut BytesMut,
    ) -> Result<bool, CodecError> {
        if object.is_corrupt() {
            return Ok(false);
        }
        let json = object.encoding(WireFormat::Json, &*self.codec)?;
        let Some(metadata) = json.metadata_at() else {
            return Ok(false);
        };
        let bytes = json.bytes();
        match json.revision_at() {
            // The encoding guarantees the revision lies within the metadata.
            Some(at) if revision != object.revision() => {
                out.put_slice(&bytes[metadata.start..at.start]);
                put_u64(out, revision.get());
                out.put_slice(&bytes[at.end..metadata.end]);
            }
            _ => out.put_slice(&bytes[metadata]),
        }
        Ok(true)
    }

    fn write_protobuf_object(
        &self,
        kind: EventKind,
        object: &ObjectVersion,
        revision: Revision,
        out: &mut BytesMut,
    ) -> Result<(), CodecError> {
        let encoding = object.encoding(WireFormat::Protobuf, &*self.codec)?;
        let event_type = match kind {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
            EventKind::Bookmark => "BOOKMARK",
        };
        let raw_len = protobuf::restamped_len(encoding, object.revision(), revision);
        protobuf::write_watch_frame_head(event_type, &self.info.api_version, &self.info.kind, raw_len, out);
        protobuf::write_restamped(encoding, object.revision(), revision, out);
        out.put_slice(protobuf::ENVELOPE_SUFFIX);
        Ok(())
    }

    /// Appends a BOOKMARK frame at `revision`, annotated as the end of the initial events
    /// when `initial_events_end`.
    pub fn write_bookmark(&self, revision: Revision, initial_events_end: bool, out: &mut BytesMut) {
        if let (WireFormat::Protobuf, Some(definition)) = (self.format, self.info.protobuf) {
            let mut meta = serde_json::Map::new();
            meta.insert("resourceVersion".into(), revision.to_string().into());
            if initial_events_end {
                meta.insert(
                    "annotations".into(),
                    serde_json::json!({"k8s.io/initial-events-end": "true"}),
                );
            }
            let mut object = serde_json::Map::new();
            object.insert("metadata".into(), meta.into());
            // A map of strings always fits the schema.
            let raw = protobuf::encode_json(definition, &object).unwrap_or_default();
            protobuf::write_watch_frame("BOOKMARK", &self.info.api_version, &self.info.kind, &raw, out);
            return;
        }
        out.put_slice(prefix(EventKind::Bookmark));
        out.put_slice(br#"{"kind":"#);
        put_str(out, &self.info.kind);
        out.put_slice(br#","apiVersion":"#);
        put_str(out, &self.info.api_version);
        out.put_slice(br#","metadata":{"resourceVersion":""#);
        put_u64(out, revision.get());
        out.put_u8(b'"');
        if initial_events_end {
            out.put_slice(br#","annotations":{"k8s.io/initial-events-end":"true"}"#);
        }
        out.put_slice(b"}}");
        out.put_slice(SUFFIX);
    }

    /// Appends a DELETED frame of `object` by its name alone, at `revision`: the deletion of a
    /// corrupt object, whose last value cannot be shown.
    fn write_deleted_name(&self, object: &ObjectVersion, revision: Revision, out: &mut BytesMut) {
        let key = object.key();
        let mut meta = serde_json::Map::new();
        meta.insert("name".into(), key.name().into());
        if !key.namespace().is_empty() {
            meta.insert("namespace".into(), key.namespace().into());
        }
        meta.insert("resourceVersion".into(), revision.to_string().into());
        if let (WireFormat::Protobuf, Some(definition)) = (self.format, self.info.protobuf) {
            let mut stub = serde_json::Map::new();
            stub.insert("metadata".into(), meta.into());
            // Strings in metadata always fit the schema.
            let raw = protobuf::encode_json(definition, &stub).unwrap_or_default();
            protobuf::write_watch_frame("DELETED", &self.info.api_version, &self.info.kind, &raw, out);
            return;
        }
        let stub = serde_json::json!({
            "kind": self.info.kind,
            "apiVersion": self.info.api_version,
            "metadata": meta,
        });
        out.put_slice(prefix(EventKind::Deleted));
        out.put_slice(stub.to_string().as_bytes());
        out.put_slice(SUFFIX);
    }

    /// Appends an ERROR frame carrying `status`.
    pub fn write_error(&self, status: &Status, out: &mut BytesMut) {
        if self.format == WireFormat::Protobuf {
            let raw = status.to_protobuf();
            protobuf::write_watch_frame("ERROR", "v1", "Status", &raw, out);
            return;
        }
        out.put_slice(br#"{"type":"ERROR","object":"#);
        out.put_slice(&status.to_json());
        out.put_slice(SUFFIX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JsonCodec;
    use serde_json::{Value, json};

    fn setup() -> (FrameEncoder, Arc<ObjectVersion>) {
        let codec = Arc::new(JsonCodec::new(true, &[]));
        let pod = codec
            .decode(
                br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"}}"#,
                Revision::new(5),
            )
            .unwrap();
        (
            FrameEncoder::new(ResourceInfo::new("pods", "Pod", "v1"), codec),
            Arc::new(pod),
        )
    }

    /// The frames of `pod` delivered as each `(kind, revision)`.
    fn deliver(enc: &FrameEncoder, pod: &Arc<ObjectVersion>, events: &[(EventKind, u64)]) -> BytesMut {
        let mut out = BytesMut::new();
        for &(kind, rev) in events {
            let d = Delivery {
                kind,
                revision: Revision::new(rev),
                object: Some(pod),
                initial_events_end: false,
            };
            enc.write(&d, &mut out).unwrap();
        }
        out
    }

    fn parse(out: &[u8]) -> Vec<Value> {
        assert!(out.ends_with(b"\n"));
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn object_frames_carry_the_shared_bytes_stamped_with_the_event_revision() {
        let (enc, pod) = setup();
        let out = deliver(
            &enc,
            &pod,
            &[
                (EventKind::Added, 5),
                (EventKind::Modified, 5),
                (EventKind::Deleted, 12345678901),
            ],
        );
        let frames = parse(&out);
        assert_eq!(frames[0]["type"], "ADDED");
        assert_eq!(frames[0]["object"]["metadata"]["resourceVersion"], "5");
        assert_eq!(frames[1]["type"], "MODIFIED");
        assert_eq!(frames[2]["type"], "DELETED");
        assert_eq!(
            frames[2]["object"]["metadata"]["resourceVersion"], "12345678901",
            "restamped in place"
        );
        assert_eq!(frames[2]["object"]["metadata"]["name"], "a");
        // The unstamped frame is prefix + the very bytes of the shared encoding + suffix.
        let shared = pod.encoded(WireFormat::Json).unwrap().bytes();
        let first = &out[..out.iter().position(|b| *b == b'\n').unwrap() + 1];
        assert_eq!(first, [prefix(EventKind::Added), &shared[..], SUFFIX].concat());
    }

    #[test]
    fn bookmark_frames_have_the_apiserver_shape() {
        let (enc, _) = setup();
        let mut out = BytesMut::new();
        enc.write_bookmark(Revision::new(9), false, &mut out);
        let d = Delivery {
            kind: EventKind::Bookmark,
            revision: Revision::new(10),
            object: None,
            initial_events_end: true,
        };
        enc.write(&d, &mut out).unwrap();
        let frames = parse(&out);
        assert_eq!(
            frames[0],
            json!({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9"}}})
        );
        assert_eq!(
            frames[1]["object"]["metadata"],
            json!({"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}})
        );
    }

    #[test]
    fn error_frames_carry_a_status() {
        let (enc, _) = setup();
        let mut out = BytesMut::new();
        enc.write_error(&Status::gone("too old resource version: 1 (5)"), &mut out);
        let frames = parse(&out);
        assert_eq!(frames[0]["type"], "ERROR");
        assert_eq!(frames[0]["object"]["code"], 410);
        assert_eq!(frames[0]["object"]["reason"], "Expired");
    }

    #[test]
    fn protobuf_frames_restamp_and_carry_bookmarks_and_errors() {
        use prost::Message as _;
        let codec = Arc::new(JsonCodec::new(true, &[]).with_protobuf("io.k8s.api.core.v1.Pod"));
        let pod = Arc::new(
            codec
                .decode(
                    br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"}}"#,
                    Revision::new(5),
                )
                .unwrap(),
        );
        let info = ResourceInfo::new("pods", "Pod", "v1");
        assert!(
            FrameEncoder::new(info.clone(), codec.clone())
                .protobuf()
                .is_none()
        );
        let enc = FrameEncoder::new(info.with_protobuf("io.k8s.api.core.v1.Pod"), codec)
            .protobuf()
            .unwrap();
        let mut out = deliver(
            &enc,
            &pod,
            &[(EventKind::Added, 5), (EventKind::Deleted, 12345678901)],
        );
        enc.write_bookmark(Revision::new(9), true, &mut out);
        enc.write_error(&Status::gone("too old resource version: 1 (5)"), &mut out);
        // Read the frames back: length, WatchEvent, envelope, object.
        let mut frames = Vec::new();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let event =
                k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&rest[4..4 + len]).unwrap();
            frames.push((event.r#type.unwrap(), event.object.unwrap().raw.unwrap()));
            rest = &rest[4 + len..];
        }
        assert_eq!(frames.len(), 4);
        let object = |i: usize, def: &str| {
            let env = protobuf::open_envelope(&frames[i].1).unwrap();
            (env.kind.clone(), protobuf::decode_json(def, env.raw).unwrap())
        };
        assert_eq!(frames[0].0, "ADDED");
        let (kind, added) = object(0, "io.k8s.api.core.v1.Pod");
        assert_eq!(
            (kind.as_str(), &added["metadata"]["resourceVersion"]),
            ("Pod", &json!("5"))
        );
        assert_eq!(frames[1].0, "DELETED");
        let (_, deleted) = object(1, "io.k8s.api.core.v1.Pod");
        assert_eq!(
            deleted["metadata"],
            json!({"name": "a", "namespace": "ns", "resourceVersion": "12345678901"})
        );
        assert_eq!(frames[2].0, "BOOKMARK");
        let (_, bookmark) = object(2, "io.k8s.api.core.v1.Pod");
        assert_eq!(
            bookmark["metadata"],
            json!({"resourceVersion": "9", "annotations": {"k8s.io/initial-events-end": "true"}})
        );
        assert_eq!(frames[3].0, "ERROR");
        let (kind, status) = object(3, "io.k8s.apimachinery.pkg.apis.meta.v1.Status");
        assert_eq!(
            (kind.as_str(), &status["code"], &status["reason"]),
            ("Status", &json!(410), &json!("Expired"))
        );
    }
}
