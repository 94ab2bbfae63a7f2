//! The JSON object codec: any bytes decode (metadata extracted, compact JSON encoded once,
//! the resourceVersion's place recorded) or are refused with a typed error, never a panic.
//! What decodes is valid JSON with the revision where the codec says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchcache_core::{Codec, Revision, WireFormat};
use watchcache_encoders::JsonCodec;

fuzz_target!(|data: &[u8]| {
    for codec in [
        JsonCodec::new(true, &["spec.nodeName", "status.phase", "spec.priority"]),
        JsonCodec::new(false, &["spec.unschedulable"]).with_default("spec.unschedulable", "false"),
    ] {
        if let Ok(object) = codec.decode(data, Revision::new(12345)) {
            let json = object.encoded(WireFormat::Json).expect("decoding makes the JSON");
            if let Some(at) = json.revision_at() {
                assert_eq!(&json.bytes()[at], b"12345");
            }
            assert!(serde_json::from_slice::<serde_json::Value>(json.bytes()).is_ok());
            let _ = codec.encode(&object, WireFormat::Protobuf);
        }
    }
});
