//! The official Python client (PyPI `kubernetes`) against `watchcache serve`: create,
//! replace, patch with each content type, delete, and a watch that sees each change
//! (tests/python/client_test.py). Needs python3 with the `kubernetes` package; says so loudly
//! when it is missing and fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::time::Duration;

use watchcache_tests::{config, missing, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_writes_patches_and_watches() {
    let has_client = std::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        missing("the Python kubernetes client (python3 -m pip install kubernetes)");
        return;
    }
    let server = start(config(0)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/client_test.py");
    let run = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", server.addr()))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finishes in time")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client_test.py failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("python client: ok, 7 events"), "{stdout}");
    server.shutdown().await.unwrap();
}
