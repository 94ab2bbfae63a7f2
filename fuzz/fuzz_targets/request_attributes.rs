//! Request attributes: any method, path and query a client sends read into authorization's
//! attributes (or a typed refusal) and a 403 message, never a panic; the same bytes read as a
//! self-check review in protobuf give a review or a typed error. The first byte picks the
//! method.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    watchcache_server::fuzz::request_attributes(data);
});
