//! What kubectl prints for the commands a kubelet serves (`logs`, `exec`, `attach`,
//! `port-forward`): this server runs no kubelets, and says so in a `Status` kubectl shows,
//! rather than a bare NotFound. Through the websocket and SPDY upgrades kubectl tries, on
//! every kubectl build on the image. Needs kubectl; says so loudly when it is missing and
//! fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use watchcache_tests::{Server, config, http, kubectl_builds, request, start};

const NO_KUBELET: &str = "runs no kubelets";

/// Runs kubectl against `server`, expecting it to fail; its stderr.
async fn fails(bin: &Path, server: &Server, args: &[&str]) -> String {
    let cache = std::env::temp_dir().join(format!("watchcache-kubectl-kubelet-{}", std::process::id()));
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(bin)
            .env("KUBECONFIG", "/dev/null")
            .arg(format!("--server=http://{}", server.addr()))
            .arg(format!("--cache-dir={}", cache.display()))
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
    .expect("kubectl runs");
    assert!(!out.status.success(), "{} {args:?} succeeded", bin.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_attach_and_port_forward_say_there_is_no_kubelet() {
    let builds = kubectl_builds();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    let client = http();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]},
    });
    let (code, body) = request(
        &client,
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(pod),
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let mut running: Value = serde_json::from_slice(&body).unwrap();
    running["status"] = json!({"phase": "Running"});
    let (code, body) = request(
        &client,
        &server,
        "PUT",
        "/api/v1/namespaces/default/pods/web/status",
        Some(running),
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    for bin in &builds {
        for args in [
            &["logs", "-n", "default", "web"][..],
            &["exec", "-n", "default", "web", "--", "ls"],
            &["attach", "-n", "default", "web"],
            &["port-forward", "-n", "default", "pod/web", "18080:80"],
        ] {
            let stderr = fails(bin, &server, args).await;
            eprintln!("{} {}: {}", bin.display(), args[0], stderr.trim());
            assert!(
                stderr.contains(NO_KUBELET),
                "{} {args:?}: {stderr}",
                bin.display()
            );
        }
    }
    // The answer itself, to a plain GET, a POST and a websocket upgrade: a 400 Status.
    for (method, path) in [
        ("GET", "/api/v1/namespaces/default/pods/web/log"),
        (
            "POST",
            "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true",
        ),
        ("GET", "/api/v1/namespaces/default/pods/web/attach?stdout=true"),
        ("POST", "/api/v1/namespaces/default/pods/web/portforward?ports=80"),
    ] {
        let (code, body) = request(&client, &server, method, path, None).await;
        let status: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (code, &status["kind"], &status["reason"]),
            (400, &json!("Status"), &json!("BadRequest")),
            "{path}"
        );
        assert!(
            status["message"].as_str().unwrap().contains(NO_KUBELET),
            "{status}"
        );
    }
    server.shutdown().await.unwrap();
}
