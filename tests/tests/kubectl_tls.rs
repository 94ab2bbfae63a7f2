//! kubectl over TLS and HTTP/2 with the `admin.kubeconfig` that `--cert-dir` writes: every
//! kubectl build on the image runs a session of verbs. Needs kubectl; says so loudly when it
//! is missing and fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use watchcache_tests::tls::temp_dir;
use watchcache_tests::{OutputLines, ServeConfig, Server, config, kubectl_every_build};

struct Kubectl<'a> {
    bin: &'a Path,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl<'_> {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(self.bin);
        c.env_remove("KUBECONFIG")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache.display()))
            .args(args)
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl to completion (bounded); stdout; fails on a non-zero exit.
    async fn run(&self, args: &[&str]) -> String {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            self.bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_build_works_over_tls_and_http2_with_the_generated_kubeconfig() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let dir = temp_dir("kubectl-tls");
    let server = Server::start(ServeConfig {
        cert_dir: Some(dir.clone()),
        ..config(0)
    })
    .await
    .expect("the server starts");
    let kubeconfig = dir.join("admin.kubeconfig");
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl {
            bin,
            kubeconfig: kubeconfig.clone(),
            cache: dir.join(format!("cache-{i}")),
        };
        let who = bin.display();
        // The first call waits for the caches to be ready.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !k
            .command(&["get", "--raw", "/readyz"])
            .output()
            .await
            .is_ok_and(|o| o.status.success())
        {
            assert!(Instant::now() < deadline, "{who}: ready in time");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Go's HTTP/2 transport says what it does under GODEBUG=http2debug=1.
        let out = k
            .command(&["get", "--raw", "/version"])
            .env("GODEBUG", "http2debug=1")
            .output()
            .await
            .expect("kubectl runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && log.contains("http2: Transport creating client conn"),
            "{who}: HTTP/2 over TLS: {log}"
        );
        let ns = format!("tls-{i}");
        let created = k.run(&["create", "namespace", &ns]).await;
        assert!(
            created.contains(&format!("namespace/{ns} created")),
            "{who}: {created}"
        );
        let manifest = dir.join(format!("cm-{i}.yaml"));
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  mode: tls\n"),
        )
        .unwrap();
        let applied = k.run(&["apply", "-f", manifest.to_str().unwrap()]).await;
        assert!(applied.contains("configmap/settings"), "{who}: {applied}");
        let got = k
            .run(&["get", "configmap", "settings", "-n", &ns, "-o", "name"])
            .await;
        assert_eq!(got.trim(), "configmap/settings", "{who}");
        let yaml = k.run(&["get", "cm", "settings", "-n", &ns, "-o", "yaml"]).await;
        assert!(
            yaml.contains("kind: ConfigMap") && yaml.contains("mode: tls"),
            "{who}: {yaml}"
        );
        // get -w: the row as it is, then a row for the change.
        let mut child = k
            .command(&["get", "cm", "settings", "-n", &ns, "-w", "--request-timeout=30s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl starts");
        let mut out = OutputLines::of(&mut child);
        assert!(out.next().await.starts_with("NAME"), "{who}");
        assert!(out.next().await.starts_with("settings "), "{who}");
        k.run(&["label", "cm", "settings", "-n", &ns, "watched=yes"])
            .await;
        assert!(
            out.next().await.starts_with("settings "),
            "{who}: the change is a row"
        );
        child.kill().await.ok();
        let deleted = k.run(&["delete", "cm", "settings", "-n", &ns]).await;
        assert!(deleted.contains("\"settings\" deleted"), "{who}: {deleted}");
        let none = k.run(&["get", "cm", "-n", &ns, "-o", "name"]).await;
        assert!(!none.contains("settings"), "{who}: {none}");
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
