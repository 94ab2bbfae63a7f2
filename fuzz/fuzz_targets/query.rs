//! Query parameters of every verb (LIST and WATCH options, write and DELETE parameters, the
//! DeleteOptions body): parsed into typed values or a Status, never a panic. The input is
//! split at the first NUL into a query string and a DELETE body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (query, body) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    watchcache_server::fuzz::query(query, body);
});
