//! JSON patches that copy, move and add, applied to a config map: whatever is accepted grows
//! the document by no more than its body and the copies allowed; run with a memory limit, so
//! an amplification past the bound is a crash (`run.sh` passes `-rss_limit_mb`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    watchcache_server::fuzz::json_patch_growth(data);
});
