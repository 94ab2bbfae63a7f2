//! Label selectors: any string parses to a selector or a typed error, never a panic; a
//! selector that parses matches objects without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use watchcache_core::{LabelSelector, ObjectKey, ObjectVersion, Revision};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(selector) = LabelSelector::parse(text) {
        let object = ObjectVersion::builder(ObjectKey::new("ns", "a"), Revision::new(1))
            .label("app", "web")
            .label("tier", "1")
            .build();
        let _ = selector.matches(&object);
    }
});
