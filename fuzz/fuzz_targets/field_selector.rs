//! Field selectors: any string parses to a selector or a typed error, never a panic; a
//! selector that parses matches objects and checks its fields without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchcache_core::{FieldSelector, Filter, ObjectKey, ObjectVersion, Revision};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(selector) = FieldSelector::parse(text) {
        let object = ObjectVersion::builder(ObjectKey::new("ns", "a"), Revision::new(1))
            .field("spec.nodeName", "node-1")
            .build();
        let _ = selector.matches(&object);
        let filter = Filter::new(Some("ns"), Default::default(), selector);
        let _ = filter.check_fields(&["spec.nodeName"]);
        let _ = filter.matches(&object);
    }
});
