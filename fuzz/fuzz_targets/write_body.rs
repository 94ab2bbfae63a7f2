//! Request bodies of POST and PUT (and PATCH once it exists): checked into an object of the
//! addressed resource or refused with a Status, never a panic; what is accepted, the
//! resource's codec decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    watchcache_server::fuzz::write_body(data);
});
