//! Watch frames, newline-delimited JSON: `{"type":"ADDED","object":…}\n`.
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

use crate::resource::ResourceInfo;
use crate::status::Status;
use crate::write::{put_str, put_u64};

/// Writes watch frames for one resource.
#[derive(Clone)]
pub struct FrameEncoder {
    info: ResourceInfo,
    codec: Arc<dyn Codec>,
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
        FrameEncoder { info, codec }
    }

    /// The resource.
    pub fn info(&self) -> &ResourceInfo {
        &self.info
    }

    /// Appends the frame for `delivery` to `out`.
    pub fn write(&self, delivery: &Delivery<'_>, out: &mut BytesMut) -> Result<(), CodecError> {
        match delivery.object {
            Some(object) => {
                out.put_slice(prefix(delivery.kind));
                self.write_object(object, delivery.revision, out)?;
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

    /// Appends a BOOKMARK frame at `revision`, annotated as the end of the initial events
    /// when `initial_events_end`.
    pub fn write_bookmark(&self, revision: Revision, initial_events_end: bool, out: &mut BytesMut) {
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

    /// Appends an ERROR frame carrying `status`.
    pub fn write_error(&self, status: &Status, out: &mut BytesMut) {
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
        let mut out = BytesMut::new();
        for (kind, rev) in [
            (EventKind::Added, 5),
            (EventKind::Modified, 5),
            (EventKind::Deleted, 12345678901),
        ] {
            let d = Delivery {
                kind,
                revision: Revision::new(rev),
                object: Some(&pod),
                initial_events_end: false,
            };
            enc.write(&d, &mut out).unwrap();
        }
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
}
