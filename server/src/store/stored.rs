//! What the server stores: an object no larger than etcd takes, on either store, and one that
//! can be served in protobuf.
//!
//! etcd refuses a request over 1.5 MiB (its default `--max-request-bytes`); the embedded store
//! would take anything. The bound is checked here, on the object as it will be stored, so
//! both stores refuse the same objects with the same answer: 1.5 MiB less 4 KiB of room for
//! the key (which a transaction carries more than once) and the transaction around it.
//!
//! Every object is also transcoded to protobuf once before it is stored: one that cannot be
//! would make every protobuf LIST and WATCH of its resource fail on it. The schema check
//! ([`validation`](crate::validation)) refuses ill-typed values first, with the apiserver's
//! words; this is the proof, by the transcoder itself, for whatever a patch or an apply made.

/// The largest object, as stored, that both stores take.
pub(crate) const MAX_OBJECT_BYTES: usize = (1536 << 10) - (4 << 10);

/// Why an object is not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// Larger than [`MAX_OBJECT_BYTES`].
    #[error("the object is {size} bytes; at most {MAX_OBJECT_BYTES} are stored")]
    TooLarge { size: usize },
    /// Its JSON does not fit its protobuf message.
    #[error("{0}")]
    NoProtobuf(String),
}

/// Admits `raw`, an object's JSON as it will be stored, of protobuf message `definition` (if
/// its resource has one).
pub(crate) fn admit(definition: Option<&str>, raw: &[u8]) -> Result<(), Refused> {
    if raw.len() > MAX_OBJECT_BYTES {
        return Err(Refused::TooLarge { size: raw.len() });
    }
    if let Some(definition) = definition {
        watchcache_encoders::protobuf::encode_json_text(definition, raw)
            .map_err(|e| Refused::NoProtobuf(e.0))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_over_the_bound_or_without_a_protobuf_form_are_refused() {
        let cm = "io.k8s.api.core.v1.ConfigMap";
        admit(Some(cm), br#"{"metadata":{"name":"c"},"data":{"a":"1"}}"#).unwrap();
        let big = format!(
            r#"{{"metadata":{{"name":"c"}},"data":{{"a":"{}"}}}}"#,
            "x".repeat(MAX_OBJECT_BYTES)
        );
        assert!(matches!(
            admit(Some(cm), big.as_bytes()),
            Err(Refused::TooLarge { .. })
        ));
        assert!(matches!(
            admit(Some(cm), br#"{"metadata":{"name":"c"},"data":{"a":1}}"#),
            Err(Refused::NoProtobuf(_))
        ));
        admit(None, br#"{"data":{"a":1}}"#).unwrap();
    }
}
