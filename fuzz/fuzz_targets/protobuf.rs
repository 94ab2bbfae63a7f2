//! Protobuf request bodies: any bytes open as an envelope and decode as each served kind, or
//! are refused with a typed error, never a panic. What decodes encodes again, and decodes to
//! the same JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchcache_encoders::protobuf;

const MESSAGES: &[&str] = &[
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.rbac.v1.Role",
    "io.k8s.api.rbac.v1.ClusterRole",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
];

fuzz_target!(|data: &[u8]| {
    let raw = match protobuf::open_envelope(data) {
        Ok(envelope) => envelope.raw,
        Err(_) => data,
    };
    for message in MESSAGES {
        let Ok(json) = protobuf::decode_json(message, raw) else { continue };
        let bytes = protobuf::encode_json(message, &json).expect("what decodes encodes");
        let again = protobuf::decode_json(message, &bytes).expect("what encodes decodes");
        assert_eq!(again, json, "{message}");
    }
});
