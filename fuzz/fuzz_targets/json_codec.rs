//! The JSON object codec: any bytes decode (metadata extracted, compact JSON encoded once,
//! the resourceVersion's place recorded) or are refused with a typed error, never a panic.
//! What decodes is valid JSON with the revision where the codec says, and its protobuf
//! encoding (when the JSON fits the schema) restamps to the revision asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchcache_core::{Codec, Revision, WireFormat};
use watchcache_encoders::{JsonCodec, protobuf};

fuzz_target!(|data: &[u8]| {
    for codec in [
        JsonCodec::new(true, &["spec.nodeName", "status.phase", "spec.priority"]).with_protobuf("io.k8s.api.core.v1.Pod"),
        JsonCodec::new(false, &["spec.unschedulable"]).with_default("spec.unschedulable", "false"),
    ] {
        if let Ok(object) = codec.decode(data, Revision::new(12345)) {
            let json = object.encoded(WireFormat::Json).expect("decoding makes the JSON");
            if let Some(at) = json.revision_at() {
                assert_eq!(&json.bytes()[at], b"12345");
            }
            assert!(serde_json::from_slice::<serde_json::Value>(json.bytes()).is_ok());
            // Protobuf, when the JSON fits the schema: restamping it is encoding it again
            // with the other revision.
            if let Ok(pb) = object.encoding(WireFormat::Protobuf, &codec) {
                let mut restamped = Vec::new();
                protobuf::write_restamped(pb, object.revision(), Revision::new(7), &mut restamped);
                assert_eq!(restamped.len(), protobuf::restamped_len(pb, object.revision(), Revision::new(7)));
                let decoded = protobuf::decode_json("io.k8s.api.core.v1.Pod", &restamped).expect("ours decodes");
                if pb.revision_at().is_some() {
                    assert_eq!(decoded["metadata"]["resourceVersion"], "7");
                }
            }
        }
    }
});
