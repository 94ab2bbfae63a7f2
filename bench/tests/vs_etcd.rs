//! The `vs-etcd` scenario at a small size, on a real etcd: every design opens every watch,
//! the writer writes at its rate, each parsing watch receives every write of the window, and
//! each row has the figures the comparison is made of. (Its figures are the runner's; here
//! only that it measures what it says.) Needs etcd: says so loudly when it is missing, and
//! fails under `WATCHCACHE_REQUIRE_EXTERNAL=1`.

use std::path::PathBuf;
use std::process::Command;

use watchcache_bench::vs_etcd::{Design, Params, ratios, run};

/// `watchcache` with the `etcd` feature, in this test's profile (built now; up to date after
/// `cargo test --workspace`, which builds the server with the tests crate's `etcd` feature).
fn server_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let profile = dir.file_name().and_then(|n| n.to_str()).expect("a profile name");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args([
        "build",
        "-p",
        "watchcache-server",
        "--features",
        "etcd",
        "--bin",
        "watchcache",
    ]);
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    let status = build
        .arg("--manifest-path")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the server with etcd failed");
    dir.join("watchcache")
}

#[test]
fn each_design_delivers_every_write_to_every_watch_and_is_measured() {
    if !watchcache_tests::etcd::available() {
        return;
    }
    let p = Params {
        watchers: vec![6],
        rates: vec![20.0],
        seconds: 2.0,
        value_bytes: 1024,
        keys: 5,
        per_connection: 4,
        reps: 1,
        designs: Design::parse_list("writes-only,etcd,etcd-prev-kv,h1,h2").expect("designs"),
        glibc_tunables: String::new(),
    };
    let binary = server_binary();
    let rows = run(&p, Some(&binary), &|_, _| {}).expect("the scenario runs");
    assert_eq!(rows.len(), 5, "{rows:#?}");
    for row in &rows {
        let num = |f: &str| row[f].as_f64().unwrap_or_else(|| panic!("{f} missing: {row}"));
        let design = row["design"].as_str().expect("a design");
        assert!(row.get("error").is_none(), "{row}");
        assert_eq!(row["write_errors"], 0, "{row}");
        // 20 writes a second for 2 s (fewer if the machine is too busy to keep the rate).
        assert!((20.0..=42.0).contains(&num("writes_in_window")), "{row}");
        assert!(num("etcd_cores") > 0.0, "{row}");
        if design == "writes-only" {
            assert_eq!(row["watchers"], 0, "{row}");
            assert_eq!(row["deliveries"], 0, "{row}");
            continue;
        }
        assert_eq!(row["failed_watchers"], 0, "{row}");
        // Every parsing watch got every write of the window, read on past its end.
        assert_eq!(row["sampled_lost"], 0, "{row}");
        assert_eq!(num("sampled_min_vs_writes"), 1.0, "{row}");
        // Deliveries counted by arrival in the window, against writes made in it.
        assert!((0.85..=1.15).contains(&num("delivered_fraction")), "{row}");
        assert!(num("server_cpu_us_per_event") > 0.0, "{row}");
        assert!(num("p99_latency_us") >= num("p50_latency_us"), "{row}");
        // etcd's watches: 2 connections of 4 and 2; watchcache's on HTTP/2 likewise, and on
        // HTTP/1.1 one each.
        let connections = if design == "h1" { 6 } else { 2 };
        assert_eq!(row["connections"], connections, "{row}");
        // Previous values only where asked for.
        let prev_kvs = if design == "etcd-prev-kv" {
            num("deliveries")
        } else {
            0.0
        };
        assert_eq!(num("prev_kv_events"), prev_kvs, "{row}");
        if design.starts_with('h') {
            // The server's CPU is watchcache's and etcd's together.
            assert!(num("server_cores") >= num("etcd_cores"), "{row}");
        } else {
            assert_eq!(num("server_cores"), num("etcd_cores"), "{row}");
        }
    }
    let r = ratios(&p, &rows);
    for key in [
        "h2_vs_etcd_w6_r20_cheaper_per_event",
        "h1_vs_etcd-prev-kv_w6_r20_p99_ratio",
    ] {
        assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r:?}");
    }
}
