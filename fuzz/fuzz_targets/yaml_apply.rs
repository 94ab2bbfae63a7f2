//! YAML apply bodies, anchors and aliases included: what the reader accepts expands to no more
//! than its budget, and applies to a pod or is refused with a Status; run with a memory limit,
//! so an alias expansion past the bound is a crash (`run.sh` passes `-rss_limit_mb`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    watchcache_server::fuzz::yaml_apply(data);
});
