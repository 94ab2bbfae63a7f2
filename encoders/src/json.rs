//! The JSON codec for Kubernetes-style objects: decode once on ingestion, keep only what
//! filtering needs, and produce the compact JSON once, as exactly-sized shared bytes.
//!
//! The decoded tree is not kept. A stored version is its encoded bytes plus key, labels and
//! the declared selectable fields: about 1.1× the JSON for a 4 KiB pod, against several times
//! the JSON for a decoded tree (a `serde_json::Value` of a 4 KiB pod is about 38 KiB).
//!
//! While writing the bytes the codec records where the `metadata.resourceVersion` value sits,
//! so a DELETED event or a selector exit can be stamped with another revision by writing
//! around that range, without re-encoding.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};
use watchcache_core::{Codec, CodecError, Encoding, ObjectKey, ObjectVersion, Revision, WireFormat};

use crate::protobuf;

/// Decodes JSON objects of one resource; see the module docs.
///
/// ```
/// use watchcache_core::{Codec, Revision, WireFormat};
/// use watchcache_encoders::JsonCodec;
///
/// let codec = JsonCodec::new(true, &["spec.nodeName"]);
/// let raw = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","labels":{"app":"web"}},"spec":{"nodeName":"n1"}}"#;
/// let pod = codec.decode(raw, Revision::new(7))?;
/// assert_eq!(pod.field("spec.nodeName"), Some("n1"));
/// let json = pod.encoded(WireFormat::Json).unwrap();
/// let rv = json.revision_at().unwrap();
/// assert_eq!(&json.bytes()[rv], b"7");
/// # Ok::<(), watchcache_core::CodecError>(())
/// ```
#[derive(Clone, Debug)]
pub struct JsonCodec {
    namespaced: bool,
    /// Selectable fields and the value each reads as when the object does not set it.
    fields: Vec<(String, Option<String>)>,
    /// The OpenAPI definition whose protobuf message the objects are, if they have one.
    protobuf: Option<&'static str>,
    /// The `apiVersion` objects are served as, when it is not the one they are stored with
    /// (a custom resource's version other than its storage version).
    api_version: Option<String>,
    /// How a stored object is converted into the form served (an events.k8s.io/v1 Event
    /// from the core Event it is stored as; a custom resource pruned and defaulted by its
    /// schemas).
    convert: Option<Convert>,
    /// The protobuf message stored values are, when it is not the served kind's (an
    /// events.k8s.io/v1 Event is stored as a core Event).
    stored_protobuf: Option<&'static str>,
}

/// A conversion of stored objects into the form served, shared by the codec's clones.
#[derive(Clone)]
struct Convert(Arc<ConvertFn>);

type ConvertFn = dyn Fn(&mut Map<String, Value>) + Send + Sync;

impl std::fmt::Debug for Convert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Convert")
    }
}

impl JsonCodec {
    /// A codec for a namespaced (or cluster-scoped) resource whose objects can be selected by
    /// `fields` (dotted paths such as `spec.nodeName`) beyond name and namespace.
    pub fn new(namespaced: bool, fields: &[&str]) -> Self {
        JsonCodec {
            namespaced,
            fields: fields.iter().map(|f| ((*f).to_owned(), None)).collect(),
            protobuf: None,
            api_version: None,
            convert: None,
            stored_protobuf: None,
        }
    }

    /// Stored values in protobuf are message `definition`, another kind's (the kind this one
    /// is converted from, [`JsonCodec::with_conversion`]).
    pub fn with_stored_protobuf(mut self, definition: &'static str) -> Self {
        self.stored_protobuf = Some(definition);
        self
    }

    /// Stored objects are converted by `convert` into the form served, before anything else
    /// reads them (a kind served over another kind's storage).
    /// A codec given a second conversion applies it after the first.
    pub fn with_conversion(
        mut self,
        convert: impl Fn(&mut Map<String, Value>) + Send + Sync + 'static,
    ) -> Self {
        self.convert = Some(match self.convert.take() {
            None => Convert(Arc::new(convert)),
            Some(first) => Convert(Arc::new(move |o: &mut Map<String, Value>| {
                (first.0)(o);
                convert(o);
            })),
        });
        self
    }

    /// The objects are protobuf message `definition` (`io.k8s.api.core.v1.Pod`), one of the
    /// generated schema's ([`protobuf::has_message`]): [`Codec::encode`] then makes their
    /// protobuf encoding from the JSON one, once per version, when it is first asked for.
    pub fn with_protobuf(mut self, definition: &'static str) -> Self {
        self.protobuf = Some(definition);
        self
    }

    /// Objects are served as `api_version` whatever they are stored as: a custom resource's
    /// versions, converted by `None` conversion (only the `apiVersion` changes).
    pub fn with_api_version(mut self, api_version: &str) -> Self {
        self.api_version = Some(api_version.to_owned());
        self
    }

    /// Field `path` reads as `value` when an object does not set it, as the apiserver's field
    /// selectors read an unset field through its Go zero value (`spec.unschedulable` is
    /// `false`, not absent). `path` becomes selectable if it was not.
    pub fn with_default(mut self, path: &str, value: &str) -> Self {
        match self.fields.iter_mut().find(|(f, _)| f == path) {
            Some((_, default)) => *default = Some(value.to_owned()),
            None => self.fields.push((path.to_owned(), Some(value.to_owned()))),
        }
        self
    }
}

fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, part| v.get(part))
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Compact JSON of `object`, and where its parts sit in it.
struct Encoded {
    bytes: Vec<u8>,
    /// The `metadata.resourceVersion` string's contents.
    revision_at: Option<Range<usize>>,
    /// The `metadata` object, braces included.
    metadata_at: Option<Range<usize>>,
}

fn encode(object: &Map<String, Value>) -> Result<Encoded, CodecError> {
    let err = |e: serde_json::Error| CodecError::Encode(e.to_string());
    let mut out = Vec::new();
    let mut at = None;
    let mut metadata_at = None;
    out.push(b'{');
    for (i, (key, value)) in object.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, key).map_err(err)?;
        out.push(b':');
        match (key.as_str(), value) {
            ("metadata", Value::Object(meta)) => {
                let meta_start = out.len();
                out.push(b'{');
                for (j, (mkey, mvalue)) in meta.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut out, mkey).map_err(err)?;
                    out.push(b':');
                    let start = out.len();
                    serde_json::to_writer(&mut out, mvalue).map_err(err)?;
                    if mkey == "resourceVersion" {
                        // The value is a string of digits: inside the quotes.
                        at = Some(start + 1..out.len() - 1);
                    }
                }
                out.push(b'}');
                metadata_at = Some(meta_start..out.len());
            }
            _ => serde_json::to_writer(&mut out, value).map_err(err)?,
        }
    }
    out.push(b'}');
    Ok(Encoded {
        bytes: out,
        revision_at: at,
        metadata_at,
    })
}

impl JsonCodec {
    /// The stored value as a JSON tree: JSON as it is, or a protobuf value (`k8s\0` and a
    /// `runtime.Unknown` envelope, what kube-apiserver stores by default) transcoded, with the
    /// envelope's `apiVersion` and `kind`.
    fn parse(&self, raw: &[u8]) -> Result<Value, CodecError> {
        let decode = |e: String| CodecError::Decode(e);
        match self.stored_protobuf.or(self.protobuf) {
            Some(definition) if raw.starts_with(protobuf::MAGIC) => {
                let envelope = protobuf::open_envelope(raw).map_err(|e| decode(e.0))?;
                let mut object = protobuf::decode_json(definition, envelope.raw).map_err(|e| decode(e.0))?;
                object.insert("apiVersion".into(), Value::String(envelope.api_version));
                object.insert("kind".into(), Value::String(envelope.kind));
                Ok(Value::Object(object))
            }
            _ => serde_json::from_slice(raw).map_err(|e| decode(e.to_string())),
        }
    }
}

impl JsonCodec {
    /// A stored value as the JSON object a write starts from: what [`Codec::decode`] reads of
    /// it, refused as decode refuses it (a value that is no object, or does not fit the
    /// kind's schema): the store's object is then corrupt.
    pub fn stored_object(&self, raw: &[u8]) -> Result<Map<String, Value>, CodecError> {
        let Value::Object(mut object) = self.parse(raw)? else {
            return Err(CodecError::Decode("not a JSON object".into()));
        };
        if let Some(convert) = &self.convert {
            (convert.0)(&mut object);
        }
        if let Some(v) = &self.api_version {
            object.insert("apiVersion".into(), Value::String(v.clone()));
        }
        let text = serde_json::to_vec(&object).map_err(|e| CodecError::Decode(e.to_string()))?;
        self.check_schema(&text)?;
        Ok(object)
    }

    /// Refuses the JSON text of an object whose value types do not fit its kind's schema (it
    /// would make no protobuf encoding). Checked, not kept: the protobuf encoding is made when
    /// first asked for.
    fn check_schema(&self, text: &[u8]) -> Result<(), CodecError> {
        let Some(definition) = self.protobuf else {
            return Ok(());
        };
        protobuf::encode_json_text(definition, text)
            .map(drop)
            .map_err(|e| {
                CodecError::Decode(format!(
                    "the object does not fit the schema of {definition}: {}",
                    e.0
                ))
            })
    }
}

impl Codec for JsonCodec {
    /// Decodes a stored value, JSON or protobuf. A value whose types do not fit its kind's
    /// schema (a number where a string goes) is refused, as the apiserver's typed decoding
    /// refuses it: it would make no protobuf encoding, and every protobuf read of it fail.
    fn decode(&self, raw: &[u8], revision: Revision) -> Result<ObjectVersion, CodecError> {
        let mut value = self.parse(raw)?;
        let Some(object) = value.as_object_mut() else {
            return Err(CodecError::Decode("not a JSON object".into()));
        };
        // A null map value or list element reads as Go reads it (its type's zero value), in
        // JSON as in protobuf. Most objects have no null at all: only those are walked.
        if let Some(definition) = self.stored_protobuf.or(self.protobuf)
            && raw.windows(4).any(|w| w == b"null")
        {
            protobuf::zero_nulls(definition, object);
        }
        if let Some(convert) = &self.convert {
            (convert.0)(object);
        }
        if let Some(v) = &self.api_version {
            object.insert("apiVersion".into(), Value::String(v.clone()));
        }
        let Some(Value::Object(meta)) = object.get_mut("metadata") else {
            return Err(CodecError::MissingName);
        };
        let name = match meta.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => return Err(CodecError::MissingName),
        };
        let namespace = match meta.get("namespace") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(ns)) => ns.clone(),
            Some(other) => {
                return Err(CodecError::Decode(format!(
                    "metadata.namespace is not a string: {other}"
                )));
            }
        };
        match (self.namespaced, namespace.is_empty()) {
            (true, true) => {
                return Err(CodecError::WrongNamespace {
                    expected: "a namespace".into(),
                    found: String::new(),
                });
            }
            (false, false) => {
                return Err(CodecError::WrongNamespace {
                    expected: String::new(),
                    found: namespace,
                });
            }
            _ => {}
        }
        let mut labels = Vec::new();
        match meta.get("labels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let Value::String(v) = v else {
                        return Err(CodecError::Decode(format!("label {k:?} is not a string")));
                    };
                    labels.push((k.clone(), v.clone()));
                }
            }
            Some(_) => return Err(CodecError::Decode("metadata.labels is not an object".into())),
        }
        meta.insert("resourceVersion".into(), Value::String(revision.to_string()));
        let mut builder = ObjectVersion::builder(ObjectKey::new(namespace, name), revision).labels(labels);
        for (path, default) in &self.fields {
            if let Some(v) = lookup(&value, path).and_then(scalar).or_else(|| default.clone()) {
                builder = builder.field(path.as_str(), v);
            }
        }
        let Value::Object(object) = &value else {
            unreachable!("checked above")
        };
        let encoded = encode(object)?;
        self.check_schema(&encoded.bytes)?;
        // Exactly sized: no spare capacity is kept for the life of the version.
        let bytes = Bytes::from(encoded.bytes.into_boxed_slice());
        let encoding = match encoded.revision_at {
            Some(at) => Encoding::with_revision_at(bytes, at),
            None => Encoding::new(bytes),
        };
        let encoding = match encoded.metadata_at {
            Some(at) => encoding.with_metadata_at(at),
            None => encoding,
        };
        Ok(builder.encoding(WireFormat::Json, encoding).build())
    }

    fn encode(&self, object: &ObjectVersion, format: WireFormat) -> Result<Encoding, CodecError> {
        match (format, object.encoded(WireFormat::Json), self.protobuf) {
            (WireFormat::Json, Some(json), _) => Ok(json.clone()),
            (WireFormat::Protobuf, Some(json), Some(definition)) => {
                let mut bytes = protobuf::encode_json_text(definition, json.bytes())
                    .map_err(|e| CodecError::Encode(e.0))?;
                bytes.shrink_to_fit();
                Ok(protobuf::object_encoding(bytes))
            }
            _ => Err(CodecError::UnsupportedFormat(format)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> JsonCodec {
        JsonCodec::new(true, &["spec.nodeName", "status.phase", "spec.priority"])
    }

    #[test]
    fn decoding_stamps_the_revision_and_extracts_key_labels_and_fields() {
        let raw = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"1","labels":{"app":"web","tier":"x"}},"spec":{"nodeName":"n1","priority":5},"status":{"phase":"Running"}}"#;
        let pod = codec().decode(raw, Revision::new(42)).unwrap();
        assert_eq!(pod.key(), &ObjectKey::new("ns", "a"));
        assert_eq!(pod.label("tier"), Some("x"));
        assert_eq!(pod.field("spec.nodeName"), Some("n1"));
        assert_eq!(pod.field("status.phase"), Some("Running"));
        assert_eq!(pod.field("spec.priority"), Some("5"));
        let json = pod.encoded(WireFormat::Json).unwrap();
        let back: Value = serde_json::from_slice(json.bytes()).unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], "42");
        assert_eq!(back["spec"]["nodeName"], "n1");
        assert_eq!(&json.bytes()[json.revision_at().unwrap()], b"42");
        // The metadata part, what a metadata-only read copies, is the metadata itself.
        let metadata: Value = serde_json::from_slice(&json.bytes()[json.metadata_at().unwrap()]).unwrap();
        assert_eq!(metadata, back["metadata"]);
        assert_eq!(
            json.bytes().len(),
            serde_json::to_vec(&back).unwrap().len(),
            "compact"
        );
    }

    #[test]
    fn an_unset_field_reads_as_its_default_and_a_set_one_as_itself() {
        let c = JsonCodec::new(false, &["spec.unschedulable"]).with_default("spec.unschedulable", "false");
        let unset = c
            .decode(br#"{"metadata":{"name":"n1"}}"#, Revision::new(1))
            .unwrap();
        assert_eq!(unset.field("spec.unschedulable"), Some("false"));
        let set = c
            .decode(
                br#"{"metadata":{"name":"n2"},"spec":{"unschedulable":true}}"#,
                Revision::new(2),
            )
            .unwrap();
        assert_eq!(set.field("spec.unschedulable"), Some("true"));
        assert_eq!(
            codec()
                .decode(br#"{"metadata":{"name":"a","namespace":"n"}}"#, Revision::new(1))
                .unwrap()
                .field("status.phase"),
            None
        );
    }

    #[test]
    fn a_nested_resource_version_elsewhere_is_not_mistaken_for_the_objects() {
        // An Event's involvedObject sorts before metadata and has its own resourceVersion.
        let raw = br#"{"involvedObject":{"resourceVersion":"999"},"metadata":{"name":"e","namespace":"ns"}}"#;
        let ev = codec().decode(raw, Revision::new(5)).unwrap();
        let json = ev.encoded(WireFormat::Json).unwrap();
        assert_eq!(&json.bytes()[json.revision_at().unwrap()], b"5");
        assert_eq!(
            &json.bytes()[json.metadata_at().unwrap()],
            br#"{"name":"e","namespace":"ns","resourceVersion":"5"}"#
        );
    }

    #[test]
    fn malformed_objects_are_typed_errors() {
        let c = codec();
        type IsError = fn(&CodecError) -> bool;
        let cases: [(&[u8], IsError); 7] = [
            (b"not json", |e| matches!(e, CodecError::Decode(_))),
            (b"[1,2]", |e| matches!(e, CodecError::Decode(_))),
            (br#"{"kind":"Pod"}"#, |e| *e == CodecError::MissingName),
            (br#"{"metadata":{"name":""}}"#, |e| *e == CodecError::MissingName),
            (br#"{"metadata":{"name":"a"}}"#, |e| {
                matches!(e, CodecError::WrongNamespace { .. })
            }),
            (
                br#"{"metadata":{"name":"a","namespace":"n","labels":{"x":1}}}"#,
                |e| matches!(e, CodecError::Decode(_)),
            ),
            (br#"{"metadata":{"name":"a","namespace":7}}"#, |e| {
                matches!(e, CodecError::Decode(_))
            }),
        ];
        for (raw, is) in cases {
            let e = c.decode(raw, Revision::new(1)).unwrap_err();
            assert!(is(&e), "{}: {e:?}", String::from_utf8_lossy(raw));
        }
        let cluster = JsonCodec::new(false, &[]);
        let e = cluster
            .decode(br#"{"metadata":{"name":"n1","namespace":"x"}}"#, Revision::new(1))
            .unwrap_err();
        assert_eq!(
            e,
            CodecError::WrongNamespace {
                expected: String::new(),
                found: "x".into()
            }
        );
        assert!(
            cluster
                .decode(br#"{"metadata":{"name":"n1"}}"#, Revision::new(1))
                .is_ok()
        );
    }

    #[test]
    fn the_bytes_have_no_spare_capacity_and_protobuf_is_not_offered() {
        let pod = codec()
            .decode(br#"{"metadata":{"name":"a","namespace":"ns"}}"#, Revision::new(1))
            .unwrap();
        let c = codec();
        assert_eq!(
            pod.encoding(WireFormat::Protobuf, &c),
            Err(CodecError::UnsupportedFormat(WireFormat::Protobuf))
        );
        assert!(pod.encoding(WireFormat::Json, &c).is_ok());
    }
}
