//! Continue tokens: any string decodes or is refused with a reason, never a panic; one that
//! decodes re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(token) = std::str::from_utf8(data) {
        watchcache_core::fuzz::continue_token(token);
    }
});
