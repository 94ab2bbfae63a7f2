//! PATCH bodies of every type, and server-side apply configurations, applied to a pod that
//! already has owners: an object or an error with a Status, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    watchcache_server::fuzz::patch(data);
});
