//! The official Python client (PyPI `kubernetes`) against `watchcache serve`: create,
//! replace, patch with each content type, delete, and a watch that sees each change
//! (tests/python/client_test.py); `create_from_yaml` over a multi-kind manifest with a CRD,
//! and `CustomObjectsApi` (tests/python/custom_objects_test.py). Needs python3 with the `kubernetes` package; says so loudly
//! when it is missing and fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::time::Duration;

use watchcache_tests::{config, missing, start};

/// Runs `script` (under tests/python/) against a new server; its stdout. Whether the client is
/// installed is checked first (and said loudly).
async fn run_script(script: &str) -> Option<String> {
    let has_client = std::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        missing("the Python kubernetes client (python3 -m pip install kubernetes)");
        return None;
    }
    let server = start(config(0)).await;
    let path = format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let run = tokio::process::Command::new("python3")
        .arg(&path)
        .arg(format!("http://{}", server.addr()))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finishes in time")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    server.shutdown().await.unwrap();
    Some(stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_writes_patches_and_watches() {
    if let Some(stdout) = run_script("client_test.py").await {
        assert!(stdout.contains("python client: ok, 7 events"), "{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_creates_from_yaml_and_serves_custom_objects() {
    if let Some(stdout) = run_script("custom_objects_test.py").await {
        assert!(stdout.contains("python custom objects: ok, 5 events"), "{stdout}");
    }
}
