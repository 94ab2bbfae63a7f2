//! kubectl, the real binaries, against `watchcache serve`: every build on the image.
//! Needs kubectl; says so loudly when it is missing and fails under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use watchcache_tests::{
    Backing, OutputLines, Server, config, http, kubectl_builds, kubectl_every_build, request, start,
};

struct Kubectl<'a> {
    bin: &'a Path,
    server: String,
    cache: std::path::PathBuf,
}

impl<'a> Kubectl<'a> {
    fn new(bin: &'a Path, server: &Server) -> Self {
        let cache = std::env::temp_dir().join(format!(
            "watchcache-kubectl-{}-{}",
            std::process::id(),
            fastrand_suffix()
        ));
        Kubectl {
            bin,
            server: format!("http://{}", server.addr()),
            cache,
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(self.bin);
        c.env("KUBECONFIG", "/dev/null")
            .arg(format!("--server={}", self.server))
            .arg(format!("--cache-dir={}", self.cache.display()))
            .args(args)
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl to completion (bounded) and returns stdout; fails on a non-zero exit.
    async fn run(&self, args: &[&str]) -> String {
        self.run_with(args, &[]).await
    }

    /// Runs kubectl expecting it to fail; returns stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("kubectl runs");
        assert!(!out.status.success(), "{} {args:?} succeeded", self.bin.display());
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Runs kubectl to completion (bounded); stdout and stderr; fails on a non-zero exit.
    async fn run_logged(&self, args: &[&str]) -> (String, String) {
        let out = tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("kubectl runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{} {args:?} failed: {stderr}",
            self.bin.display()
        );
        (String::from_utf8(out.stdout).expect("utf-8 output"), stderr)
    }

    /// [`Kubectl::run`] with environment variables set (`EDITOR` for `edit`).
    async fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        let out = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("kubectl runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} {args:?} failed: {stderr}",
            self.bin.display()
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }
}

fn fastrand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_gets_filters_and_pages_like_against_an_apiserver() {
    lists_gets_filters_and_pages(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_gets_filters_and_pages_on_etcd() {
    lists_gets_filters_and_pages(true).await;
}

async fn lists_gets_filters_and_pages(etcd: bool) {
    let builds = kubectl_builds();
    if builds.is_empty() {
        return;
    }
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = start(backing.config(1000)).await;
    // Paged by 7 over 1,000 pods: every pod exactly once. kubectl throttles itself to 5
    // requests a second after a burst of 10 (client-go's default, against any server), so the
    // 143 pages take about 27 s; the builds page concurrently.
    let paged = futures_util::future::join_all(builds.iter().map(|bin| {
        let k = Kubectl::new(bin, &server);
        async move {
            (
                bin,
                k.run(&["get", "pods", "-A", "--chunk-size=7", "-o", "name"])
                    .await,
            )
        }
    }))
    .await;
    for (bin, names) in paged {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for n in lines(&names) {
            *counts.entry(n).or_default() += 1;
        }
        assert_eq!(counts.len(), 1000, "{}: every pod", bin.display());
        assert!(
            counts.values().all(|&c| c == 1),
            "{}: exactly once",
            bin.display()
        );
    }
    for bin in &builds {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();

        let all = k.run(&["get", "pods", "-A"]).await;
        assert_eq!(lines(&all).len(), 1001, "{who}: a header and 1,000 pods");
        assert!(
            all.starts_with("NAMESPACE"),
            "{who}: {}",
            &all[..80.min(all.len())]
        );

        let ns = k.run(&["get", "pods", "-n", "ns-3", "-o", "name"]).await;
        assert_eq!(lines(&ns).len(), 100, "{who}: one namespace");
        assert!(
            lines(&ns)
                .iter()
                .all(|l| l.starts_with("pod/web-") && l.ends_with('3')),
            "{who}"
        );

        let one = k
            .run(&["get", "pod", "web-000013", "-n", "ns-3", "-o", "json"])
            .await;
        let pod: Value = serde_json::from_str(&one).expect("json");
        assert_eq!(pod["metadata"]["name"], "web-000013");
        assert_eq!(pod["kind"], "Pod");

        let list: Value =
            serde_json::from_str(&k.run(&["get", "pods", "-n", "ns-0", "-o", "json"]).await).expect("json");
        assert_eq!(
            list["items"].as_array().map(Vec::len),
            Some(100),
            "{who}: -o json"
        );

        let api = k.run(&["get", "pods", "-A", "-l", "app=api", "-o", "name"]).await;
        assert_eq!(lines(&api).len(), 334, "{who}: -l app=api (every third pod)");

        let node = k
            .run(&[
                "get",
                "pods",
                "-A",
                "--field-selector",
                "spec.nodeName=node-5",
                "-o",
                "name",
            ])
            .await;
        assert_eq!(
            lines(&node).len(),
            30,
            "{who}: --field-selector spec.nodeName=node-5"
        );

        let nodes = k.run(&["get", "nodes", "-o", "name"]).await;
        assert_eq!(lines(&nodes).len(), 34, "{who}: cluster-scoped nodes");
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_changes_and_creates_and_deletes_without_openapi() {
    watches_creates_and_deletes(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_changes_and_creates_and_deletes_on_etcd() {
    watches_creates_and_deletes(true).await;
}

async fn watches_creates_and_deletes(etcd: bool) {
    let builds = kubectl_builds();
    if builds.is_empty() {
        return;
    }
    let Some(backing) = Backing::new(etcd).await else {
        return;
    };
    let server = start(backing.config(20)).await;
    // One file per variant: the embedded and etcd variants run at once in this process.
    let manifest = std::env::temp_dir().join(format!("watchcache-pod-{}-{etcd}.json", std::process::id()));
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        // `get pods -w` in the background, reading its output line by line.
        let mut child = k
            .command(&[
                "get",
                "pods",
                "-n",
                "ns-1",
                "-w",
                "--output-watch-events",
                "-o",
                "name",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl starts");
        let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
        // The initial list comes first: two pods in ns-1.
        for _ in 0..2 {
            let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
                .await
                .expect("listed")
                .unwrap();
            assert!(line.is_some_and(|l| l.starts_with("pod/web-")), "{who}");
        }
        let name = format!("hello-{i}");
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns-1", "labels": {"app": "hello"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        });
        std::fs::write(&manifest, pod.to_string()).expect("manifest written");
        let created = k
            .run(&[
                "create",
                "-f",
                manifest.to_str().expect("utf-8 path"),
                "--validate=false",
            ])
            .await;
        assert!(
            created.contains(&format!("pod/{name} created")),
            "{who}: {created}"
        );
        let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
            .await
            .expect("watched")
            .unwrap();
        assert_eq!(
            line.as_deref(),
            Some(format!("pod/{name}").as_str()),
            "{who}: the watch saw the create"
        );
        // A server-side dry run deletes nothing (the watch sees nothing for it).
        let dry = k
            .run(&["delete", "pod", &name, "-n", "ns-1", "--dry-run=server"])
            .await;
        assert!(dry.contains("(server dry run)"), "{who}: {dry}");
        let still = k.run(&["get", "pod", &name, "-n", "ns-1", "-o", "name"]).await;
        assert_eq!(
            still.trim(),
            format!("pod/{name}"),
            "{who}: still there after the dry run"
        );
        let deleted = k
            .run(&["delete", "pod", &name, "-n", "ns-1", "--wait=false"])
            .await;
        assert!(
            deleted.contains(&format!("\"{name}\" deleted")),
            "{who}: {deleted}"
        );
        let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
            .await
            .expect("watched")
            .unwrap();
        assert_eq!(
            line.as_deref(),
            Some(format!("pod/{name}").as_str()),
            "{who}: the watch saw the delete"
        );
        child.kill().await.ok();

        // A raw watch from rv 0 with bookmarks: ADDED frames for the state, newline-delimited.
        let mut raw = k
            .command(&[
                "get",
                "--raw",
                "/api/v1/namespaces/ns-2/pods?watch=1&resourceVersion=0&allowWatchBookmarks=true",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl starts");
        let mut frames = BufReader::new(raw.stdout.take().expect("stdout")).lines();
        let mut kinds = Vec::new();
        while kinds.len() < 3 {
            let line = tokio::time::timeout(Duration::from_secs(30), frames.next_line())
                .await
                .expect("a frame")
                .unwrap();
            let frame: Value = serde_json::from_str(&line.expect("a line")).expect("a JSON frame");
            kinds.push(frame["type"].as_str().unwrap_or_default().to_owned());
        }
        // Two pods in ns-2, then (the bookmark interval is 1 s in tests) a bookmark.
        assert_eq!(kinds, vec!["ADDED", "ADDED", "BOOKMARK"], "{who}");
        raw.kill().await.ok();
    }
    let _ = std::fs::remove_file(&manifest);
    // Everything kubectl did went through the source and back through the cache.
    let (code, body) = request(&http(), &server, "GET", "/api/v1/namespaces/ns-1/pods", None).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    server.shutdown().await.unwrap();
}

/// The verbs that write through PATCH and validate against the OpenAPI documents (with
/// validation on), and the server-side Table, on every build: kubectl before 1.29 reads
/// /openapi/v2 in protobuf, later ones /openapi/v3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_patches_edits_explains_and_prints_tables_on_every_build() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    let dir = std::env::temp_dir().join(format!(
        "watchcache-apply-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("manifest written");
        path.to_str().expect("utf-8 path").to_owned()
    };
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        let ns = format!("build-{i}");
        // Objects need their namespace (created with apply: `create namespace` sends protobuf).
        let out = k
            .run(&[
                "apply",
                "-f",
                &file(
                    "ns.yaml",
                    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
                ),
            ])
            .await;
        assert!(out.contains(&format!("namespace/{ns} created")), "{who}: {out}");
        let cm = |value: &str| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  mode: \"{value}\"\n"
            )
        };
        let out = k.run(&["apply", "-f", &file("cm1.yaml", cm("fast"))]).await;
        assert!(out.contains("configmap/settings created"), "{who}: {out}");
        let out = k.run(&["apply", "-f", &file("cm2.yaml", cm("safe"))]).await;
        assert!(out.contains("configmap/settings configured"), "{who}: {out}");
        let mode = k
            .run(&["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.data.mode}"])
            .await;
        assert_eq!(mode, "safe", "{who}");
        // Server-side apply, and a dry run on the server that deletes nothing.
        let ssa = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: {ns}\ndata:\n  k: v\n"
        );
        let out = k
            .run(&["apply", "--server-side", "-f", &file("ssa.yaml", ssa)])
            .await;
        assert!(out.contains("configmap/ssa serverside-applied"), "{who}: {out}");
        let out = k
            .run(&["delete", "cm", "ssa", "-n", &ns, "--dry-run=server"])
            .await;
        assert!(out.contains("(server dry run)"), "{who}: {out}");
        k.run(&["get", "cm", "ssa", "-n", &ns]).await;

        // Validation is on: a field no ConfigMap has is refused, naming it.
        let bad = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  namespace: {ns}\ndataa:\n  a: b\n"
        );
        let err = k.fails(&["apply", "-f", &file("bad.yaml", bad)]).await;
        assert!(err.contains("unknown field \"dataa\""), "{who}: {err}");

        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  containers:\n  \
             - name: app\n    image: nginx:1\n  - name: sidecar\n    image: busybox:1\n"
        );
        let out = k.run(&["apply", "-f", &file("pod.yaml", pod)]).await;
        assert!(out.contains("pod/web created"), "{who}: {out}");
        let out = k.run(&["label", "pod", "web", "-n", &ns, "tier=front"]).await;
        assert!(out.contains("pod/web labeled"), "{who}: {out}");
        let out = k.run(&["annotate", "pod", "web", "-n", &ns, "note=hello"]).await;
        // (kubectl 1.27 prints "annotate", later builds "annotated".)
        assert!(out.contains("pod/web annotate"), "{who}: {out}");
        // Strategic (kubectl's default): the sidecar is merged by name, app is kept.
        let out = k
            .run(&[
                "patch",
                "pod",
                "web",
                "-n",
                &ns,
                "-p",
                r#"{"spec":{"containers":[{"name":"sidecar","image":"busybox:2"}]}}"#,
            ])
            .await;
        assert!(out.contains("pod/web patched"), "{who}: {out}");
        k.run(&[
            "patch",
            "pod",
            "web",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"merged":"yes"}}}"#,
        ])
        .await;
        k.run(&[
            "patch",
            "pod",
            "web",
            "-n",
            &ns,
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/labels/json","value":"yes"}]"#,
        ])
        .await;
        let out = k
            .run_with(
                &["edit", "pod", "web", "-n", &ns],
                &[("EDITOR", "sed -i s/busybox:2/busybox:3/")],
            )
            .await;
        assert!(out.contains("pod/web edited"), "{who}: {out}");

        let pod: Value = serde_json::from_str(&k.run(&["get", "pod", "web", "-n", &ns, "-o", "json"]).await)
            .expect("json");
        let images: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .map(|c| c["image"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(images, ["nginx:1", "busybox:3"], "{who}: {pod}");
        assert_eq!(
            pod["metadata"]["labels"],
            serde_json::json!({"tier": "front", "merged": "yes", "json": "yes"}),
            "{who}"
        );
        assert_eq!(pod["metadata"]["annotations"]["note"], "hello", "{who}");
        // What each verb did is recorded under its own manager.
        let (_, raw) = request(
            &http(),
            &server,
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods/web"),
            None,
        )
        .await;
        let raw: Value = serde_json::from_slice(&raw).expect("json");
        let managers: Vec<&str> = raw["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .map(|m| m["manager"].as_str().unwrap_or_default())
            .collect();
        for m in [
            "kubectl-client-side-apply",
            "kubectl-label",
            "kubectl-annotate",
            "kubectl-patch",
            "kubectl-edit",
        ] {
            assert!(managers.contains(&m), "{who}: {m} in {managers:?}");
        }

        // The server's Table: the apiserver's pod columns, -o wide adds four.
        let table = k.run(&["get", "pods", "-n", &ns]).await;
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
            "{who}: {table}"
        );
        let row: Vec<&str> = table
            .lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(row[..4], ["web", "0/2", "Pending", "0"], "{who}: {table}");
        let wide = k.run(&["get", "pods", "-n", &ns, "-o", "wide"]).await;
        let header = wide.lines().next().unwrap_or_default();
        assert!(
            header.contains("IP")
                && header.contains("NODE")
                && header.contains("NOMINATED NODE")
                && header.contains("READINESS GATES"),
            "{who}: {wide}"
        );
        let data = k.run(&["get", "cm", "-n", &ns]).await;
        assert!(
            data.starts_with("NAME") && data.contains("DATA") && data.contains("settings"),
            "{who}: {data}"
        );
        // get -w: a row for the pod as it is, then one for each change.
        let mut child = k
            .command(&["get", "pods", "-n", &ns, "-w"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl starts");
        let mut out = OutputLines::of(&mut child);
        assert!(out.next().await.starts_with("NAME"), "{who}");
        assert!(out.next().await.starts_with("web "), "{who}");
        k.run(&["label", "pod", "web", "-n", &ns, "watched=yes"]).await;
        assert!(out.next().await.starts_with("web "), "{who}: the change is a row");
        child.kill().await.ok();

        // describe lists the pod's events; wait --for=delete returns once it is gone.
        let uid = k
            .run(&["get", "pod", "web", "-n", &ns, "-o", "jsonpath={.metadata.uid}"])
            .await;
        let event = format!(
            "apiVersion: v1\nkind: Event\nmetadata:\n  name: web.started\n  namespace: {ns}\ninvolvedObject:\n  \
             kind: Pod\n  name: web\n  namespace: {ns}\n  uid: {uid}\nreason: Started\nmessage: Started container app\n\
             type: Normal\nsource:\n  component: kubelet\n"
        );
        k.run(&["apply", "-f", &file("event.yaml", event)]).await;
        let described = k.run(&["describe", "pod", "web", "-n", &ns]).await;
        assert!(
            described.contains("Containers:") && described.contains("sidecar"),
            "{who}: {described}"
        );
        let events = described.split("Events:").nth(1).unwrap_or_default();
        assert!(events.contains("Started container app"), "{who}: {described}");
        let waiting = k
            .command(&["wait", "--for=delete", "pod/web", "-n", &ns, "--timeout=30s"])
            .output();
        let deleting = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            k.run(&["delete", "pod", "web", "-n", &ns, "--wait=false"]).await
        };
        let (waited, _) = tokio::join!(waiting, deleting);
        let waited = waited.expect("kubectl wait runs");
        assert!(
            waited.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&waited.stderr)
        );
        // delete --all: every ConfigMap of the namespace, and nothing of any other.
        let out = k.run(&["delete", "cm", "--all", "-n", &ns]).await;
        assert!(
            out.contains("configmap \"settings\" deleted") && out.contains("configmap \"ssa\" deleted"),
            "{who}: {out}"
        );
        assert!(
            k.run(&["get", "cm", "-n", &ns, "-o", "name"])
                .await
                .trim()
                .is_empty(),
            "{who}"
        );

        let explained = k.run(&["explain", "pod.spec.containers"]).await;
        assert!(
            explained.contains("containers") && explained.contains("DESCRIPTION"),
            "{who}: {explained}"
        );
        assert!(
            explained.contains("List of containers belonging to the pod"),
            "{who}: {explained}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    server.shutdown().await.unwrap();
}

/// kubectl's typed verbs (`create namespace`, `create configmap`, `create secret`, `run`) send
/// protobuf bodies and ask for protobuf answers; every build on the image gets its objects
/// made, and the pod reads back the same in JSON and in protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_and_deletes_with_protobuf_bodies_on_every_build() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    let client = http();
    let mut protobuf_builds = Vec::new();
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        let ns = format!("typed-{i}");
        // -v=8 logs the request headers: which builds send protobuf (older ones send JSON).
        let (out, log) = k.run_logged(&["create", "namespace", &ns, "-v=8"]).await;
        assert!(out.contains(&format!("namespace/{ns} created")), "{who}: {out}");
        if log.contains("Content-Type: application/vnd.kubernetes.protobuf") {
            protobuf_builds.push(who.to_string());
        }
        let out = k
            .run(&[
                "create",
                "configmap",
                "settings",
                "-n",
                &ns,
                "--from-literal=mode=fast",
                "--from-literal=level=3",
            ])
            .await;
        assert!(out.contains("configmap/settings created"), "{who}: {out}");
        let data = k
            .run(&["get", "cm", "settings", "-n", &ns, "-o", "jsonpath={.data}"])
            .await;
        let data: Value = serde_json::from_str(&data).expect("JSON data");
        assert_eq!(data, serde_json::json!({"mode": "fast", "level": "3"}), "{who}");
        let out = k
            .run(&[
                "create",
                "secret",
                "generic",
                "token",
                "-n",
                &ns,
                "--from-literal=key=s3cr3t",
            ])
            .await;
        assert!(out.contains("secret/token created"), "{who}: {out}");
        let key = k
            .run(&["get", "secret", "token", "-n", &ns, "-o", "jsonpath={.data.key}"])
            .await;
        assert_eq!(key, "czNjcjN0", "{who}: base64 of the bytes sent");
        let out = k
            .run(&[
                "run",
                "web",
                "-n",
                &ns,
                "--image=nginx:1.27",
                "--labels=app=web,tier=front",
                "--port=8080",
            ])
            .await;
        assert!(out.contains("pod/web created"), "{who}: {out}");

        // The pod as JSON: what kubectl sent, defaulted as the apiserver does.
        let path = format!("/api/v1/namespaces/{ns}/pods/web");
        let (code, body) = request(&client, &server, "GET", &path, None).await;
        assert_eq!(code, 200);
        let json: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            json["metadata"]["labels"],
            serde_json::json!({"app": "web", "tier": "front"}),
            "{who}"
        );
        let container = &json["spec"]["containers"][0];
        assert_eq!(
            (container["name"].as_str(), container["image"].as_str()),
            (Some("web"), Some("nginx:1.27")),
            "{who}"
        );
        assert_eq!(container["ports"][0]["containerPort"], 8080, "{who}");
        assert_eq!(json["spec"]["restartPolicy"], "Always", "{who}");
        assert_eq!(json["status"]["phase"], "Pending", "{who}");
        assert_eq!(
            json["metadata"]["managedFields"][0]["manager"], "kubectl-run",
            "{who}"
        );
        // No empty strings from the Go client's zero values.
        assert!(
            !body.windows(3).any(|w| w == b"\"\"," || w == b"\"\"}"),
            "{who}: {json}"
        );
        // The same pod in protobuf, decoded, is the same object.
        let (code, ct, pb) =
            watchcache_tests::get_raw(&server, &path, "application/vnd.kubernetes.protobuf").await;
        assert_eq!(
            (code, ct.as_deref()),
            (200, Some("application/vnd.kubernetes.protobuf"))
        );
        let envelope = watchcache_encoders::protobuf::open_envelope(&pb).expect("an envelope");
        assert_eq!(
            (envelope.api_version.as_str(), envelope.kind.as_str()),
            ("v1", "Pod")
        );
        let mut decoded =
            watchcache_encoders::protobuf::decode_json("io.k8s.api.core.v1.Pod", envelope.raw).unwrap();
        decoded.insert("apiVersion".into(), "v1".into());
        decoded.insert("kind".into(), "Pod".into());
        assert_eq!(Value::Object(decoded), json, "{who}");
        // kubectl reads it too, in the table and in full.
        let out = k.run(&["get", "pod", "web", "-n", &ns]).await;
        assert!(out.contains("Pending"), "{who}: {out}");

        for (kind, name) in [("pod", "web"), ("configmap", "settings"), ("secret", "token")] {
            let out = k.run(&["delete", kind, name, "-n", &ns]).await;
            assert!(
                out.contains(&format!("{kind} \"{name}\" deleted")),
                "{who}: {out}"
            );
        }
        let out = k.run(&["delete", "namespace", &ns, "--wait=false"]).await;
        assert!(
            out.contains(&format!("namespace \"{ns}\" deleted")),
            "{who}: {out}"
        );
    }
    eprintln!("builds that sent protobuf bodies: {protobuf_builds:?}");
    assert!(
        protobuf_builds.iter().any(|b| b == "/usr/bin/kubectl"),
        "the image's kubectl sends protobuf for typed verbs: {protobuf_builds:?}"
    );
}

/// `kubectl delete pod` waits for the pod to go; on this server no kubelet finishes a
/// graceful deletion, so the pod garbage collector does: at once for a pod whose node does not
/// exist, when the grace period runs out for one on a node that does (the seeded pods' nodes
/// exist). Secrets written with stringData show their keys in the DATA column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_returns_for_pods_bound_to_a_node_and_secrets_show_their_data() {
    let builds = kubectl_builds();
    let Some(bin) = builds.first() else {
        return;
    };
    let server = start(config(30)).await;
    let k = Kubectl::new(bin, &server);
    let ghost = serde_json::json!({"metadata": {"name": "ghost"},
        "spec": {"nodeName": "gone", "containers": [{"name": "c", "image": "busybox"}]}});
    let (code, _) = request(
        &http(),
        &server,
        "POST",
        "/api/v1/namespaces/ns-1/pods",
        Some(ghost),
    )
    .await;
    assert_eq!(code, 201);
    for args in [
        &["delete", "pod", "ghost", "-n", "ns-1"][..],
        &["delete", "pod", "web-000001", "-n", "ns-1", "--grace-period=1"][..],
    ] {
        let out = k.run(args).await;
        assert!(out.contains("\" deleted"), "{args:?}: {out}");
        let path = format!("/api/v1/namespaces/ns-1/pods/{}", args[2]);
        let (code, _) = request(&http(), &server, "GET", &path, None).await;
        assert_eq!(code, 404, "{args:?}: kubectl returned once the pod was gone");
    }
    let secret =
        serde_json::json!({"metadata": {"name": "creds"}, "stringData": {"user": "admin", "pw": "hunter2"}});
    let (code, _) = request(
        &http(),
        &server,
        "POST",
        "/api/v1/namespaces/ns-1/secrets",
        Some(secret),
    )
    .await;
    assert_eq!(code, 201);
    let out = k.run(&["get", "secret", "creds", "-n", "ns-1"]).await;
    let row: Vec<&str> = lines(&out)[1].split_whitespace().collect();
    assert_eq!(row[..3], ["creds", "Opaque", "2"], "{out}");
    let yaml = k
        .run(&["get", "secret", "creds", "-n", "ns-1", "-o", "yaml"])
        .await;
    assert!(
        !yaml.contains("hunter2") && !yaml.contains("stringData"),
        "{yaml}"
    );
    server.shutdown().await.unwrap();
}

/// The RBAC objects with kubectl's own commands on every build: `create role`, `rolebinding`,
/// `clusterrole` and `clusterrolebinding`, their Tables (`-o wide` with each kind of subject),
/// `describe`, a binding's role reference refused a change, and `delete`; and the bootstrap
/// policy there from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_describes_and_deletes_rbac_objects_on_every_build() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        let ns = format!("rbac-{i}");
        let (reader, admins) = (format!("node-reader-{i}"), format!("node-readers-{i}"));
        k.run(&["create", "namespace", &ns]).await;

        let out = k
            .run(&[
                "create",
                "role",
                "reader",
                "-n",
                &ns,
                "--verb=get,list,watch",
                "--resource=pods,configmaps",
            ])
            .await;
        assert!(
            out.contains("role.rbac.authorization.k8s.io/reader created"),
            "{who}: {out}"
        );
        let out = k
            .run(&[
                "create",
                "rolebinding",
                "read-it",
                "-n",
                &ns,
                "--role=reader",
                "--user=alice",
                "--group=devs",
                &format!("--serviceaccount={ns}:default"),
            ])
            .await;
        assert!(
            out.contains("rolebinding.rbac.authorization.k8s.io/read-it created"),
            "{who}: {out}"
        );
        let out = k
            .run(&[
                "create",
                "clusterrole",
                &reader,
                "--verb=get,list",
                "--resource=nodes",
            ])
            .await;
        assert!(
            out.contains(&format!("clusterrole.rbac.authorization.k8s.io/{reader} created")),
            "{who}: {out}"
        );
        let out = k
            .run(&[
                "create",
                "clusterrolebinding",
                &admins,
                &format!("--clusterrole={reader}"),
                "--group=ops",
            ])
            .await;
        assert!(out.contains("created"), "{who}: {out}");

        // Tables, as the apiserver prints them.
        let out = k.run(&["get", "roles", "-n", &ns]).await;
        let rows = lines(&out);
        assert!(
            rows[0].starts_with("NAME") && rows[0].contains("CREATED AT"),
            "{who}: {out}"
        );
        assert!(rows[1].starts_with("reader "), "{who}: {out}");
        let out = k.run(&["get", "rolebindings", "-n", &ns, "-o", "wide"]).await;
        let rows = lines(&out);
        for column in ["ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"] {
            assert!(rows[0].contains(column), "{who}: {out}");
        }
        for cell in [
            "read-it",
            "Role/reader",
            "alice",
            "devs",
            &format!("{ns}/default"),
        ] {
            assert!(rows[1].contains(cell), "{who}: {cell} in {out}");
        }
        let out = k.run(&["get", "clusterrolebinding", &admins]).await;
        assert!(out.contains(&format!("ClusterRole/{reader}")), "{who}: {out}");
        // The bootstrap policy.
        let out = k.run(&["get", "clusterroles"]).await;
        for name in [
            "cluster-admin",
            "system:discovery",
            "system:basic-user",
            "system:public-info-viewer",
        ] {
            assert!(out.contains(name), "{who}: {name} in {out}");
        }
        let out = k
            .run(&["get", "clusterrolebinding", "cluster-admin", "-o", "wide"])
            .await;
        assert!(out.contains("system:masters"), "{who}: {out}");

        // describe, which reads each kind its own way.
        let out = k.run(&["describe", "role", "reader", "-n", &ns]).await;
        assert!(
            out.contains("PolicyRule") && out.contains("pods") && out.contains("[get list watch]"),
            "{who}: {out}"
        );
        let out = k.run(&["describe", "rolebinding", "read-it", "-n", &ns]).await;
        for text in ["Kind:  Role", "User", "alice", "Group", "devs", "ServiceAccount"] {
            assert!(out.contains(text), "{who}: {text} in {out}");
        }
        let out = k.run(&["describe", "clusterrole", &reader]).await;
        assert!(
            out.contains("nodes") && out.contains("[get list]"),
            "{who}: {out}"
        );
        let out = k.run(&["describe", "clusterrolebinding", &admins]).await;
        assert!(out.contains("ClusterRole") && out.contains("ops"), "{who}: {out}");
        let out = k.run(&["describe", "clusterrole", "cluster-admin"]).await;
        assert!(
            out.contains("rbac-defaults") && out.contains("[*]"),
            "{who}: {out}"
        );

        // A binding's role is fixed once made.
        let err = k
            .fails(&[
                "patch",
                "rolebinding",
                "read-it",
                "-n",
                &ns,
                "--type=merge",
                "-p",
                r#"{"roleRef":{"name":"other"}}"#,
            ])
            .await;
        assert!(err.contains("cannot change roleRef"), "{who}: {err}");

        for (kind, name, namespaced) in [
            ("rolebinding", "read-it", true),
            ("role", "reader", true),
            ("clusterrolebinding", admins.as_str(), false),
            ("clusterrole", reader.as_str(), false),
        ] {
            let mut args = vec!["delete", kind, name];
            if namespaced {
                args.extend(["-n", ns.as_str()]);
            }
            let out = k.run(&args).await;
            assert!(out.contains("deleted"), "{who}: {out}");
            args[0] = "get";
            let err = k.fails(&args).await;
            assert!(
                err.contains("NotFound") || err.contains("not found"),
                "{who}: {err}"
            );
        }
    }
    server.shutdown().await.unwrap();
}

/// The workload verbs: `create deployment`, `scale` (through `/scale`), `expose` (a Service
/// with an allocated cluster IP), `get all` and `api-resources`, on every build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_scales_and_exposes_deployments_on_every_build() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        let ns = format!("workloads-{i}");
        k.run(&["create", "namespace", &ns]).await;
        let created = k
            .run(&["create", "deployment", "web", "--image=nginx:1.27", "-n", &ns])
            .await;
        assert!(
            created.contains("deployment.apps/web created"),
            "{who}: {created}"
        );
        let scaled = k
            .run(&["scale", "deployment", "web", "--replicas=3", "-n", &ns])
            .await;
        assert!(scaled.contains("deployment.apps/web scaled"), "{who}: {scaled}");
        let replicas = k
            .run(&[
                "get",
                "deployment",
                "web",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .await;
        assert_eq!(replicas, "3", "{who}");
        let exposed = k
            .run(&["expose", "deployment", "web", "--port=80", "-n", &ns])
            .await;
        assert!(exposed.contains("service/web exposed"), "{who}: {exposed}");
        let service: Value =
            serde_json::from_str(&k.run(&["get", "service", "web", "-n", &ns, "-o", "json"]).await).unwrap();
        assert!(
            service["spec"]["clusterIP"]
                .as_str()
                .is_some_and(|ip| ip.starts_with("10.0.0.")),
            "{who}: {service}"
        );
        assert_eq!(service["spec"]["selector"]["app"], "web", "{who}: {service}");
        // Tables: the apiserver's columns.
        let table = k.run(&["get", "deployment", "web", "-n", &ns]).await;
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            "{who}: {table}"
        );
        assert!(table.contains("0/3"), "{who}: {table}");
        let all = k.run(&["get", "all", "-n", &ns]).await;
        for wanted in ["deployment.apps/web", "service/web"] {
            assert!(all.contains(wanted), "{who}: get all lacks {wanted}: {all}");
        }
        let everywhere = k.run(&["get", "all", "-A"]).await;
        assert!(everywhere.contains("service/kubernetes"), "{who}: {everywhere}");
        let resources = k.run(&["api-resources"]).await;
        for wanted in [
            "deployments",
            "statefulsets",
            "cronjobs",
            "endpointslices",
            "horizontalpodautoscalers",
            "ingresses",
        ] {
            assert!(resources.contains(wanted), "{who}: api-resources lacks {wanted}");
        }
    }
    server.shutdown().await.unwrap();
}

/// CustomResourceDefinitions through kubectl, on every build: `apply` of a CRD and of custom
/// resources, `get` with the CRD's printer columns, `explain`, `scale` through the CRD's
/// `/scale`, `edit`, a custom resource the schema refuses, and `delete` of the CRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_explains_scales_and_deletes_custom_resources_on_every_build() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let server = start(config(0)).await;
    let dir = std::env::temp_dir().join(format!("watchcache-kubectl-crd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, bin) in builds.iter().enumerate() {
        let k = Kubectl::new(bin, &server);
        let who = bin.display();
        let group = format!("b{i}.example.com");
        let crd_name = format!("widgets.{group}");
        let ns = format!("crs-{i}");
        k.run(&["create", "namespace", &ns]).await;
        let crd = dir.join(format!("crd-{i}.yaml"));
        std::fs::write(
            &crd,
            format!(
                r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {crd_name}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {{}}
      scale: {{specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    additionalPrinterColumns:
    - {{name: Color, type: string, jsonPath: .spec.color}}
    - {{name: Replicas, type: integer, jsonPath: .spec.replicas}}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget of the kubectl test.
        properties:
          spec:
            type: object
            description: What the widget should be.
            required: [color]
            properties:
              color: {{type: string, enum: [red, blue], description: The widget's color.}}
              replicas: {{type: integer, minimum: 0, default: 1}}
          status:
            type: object
            properties:
              replicas: {{type: integer}}
"#
            ),
        )
        .unwrap();
        let applied = k.run(&["apply", "-f", crd.to_str().unwrap()]).await;
        assert!(
            applied.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{crd_name} created"
            )),
            "{who}: {applied}"
        );
        k.run(&[
            "wait",
            "--for=condition=Established",
            "--timeout=10s",
            &format!("crd/{crd_name}"),
        ])
        .await;
        let crs = dir.join(format!("crs-{i}.yaml"));
        std::fs::write(
            &crs,
            format!(
                "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w1}}\nspec: {{color: red}}\n---\n\
                 apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w2}}\nspec: {{color: blue, replicas: 2}}\n"
            ),
        )
        .unwrap();
        let applied = k.run(&["apply", "-n", &ns, "-f", crs.to_str().unwrap()]).await;
        assert!(
            applied.contains(&format!("widget.{group}/w1 created")),
            "{who}: {applied}"
        );
        // The printer columns, and the schema's default.
        let table = k.run(&["get", "widgets", "-n", &ns]).await;
        let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
        // The declared columns alone: Age is a default column only of a CRD that declares none.
        assert_eq!(rows[0], ["NAME", "COLOR", "REPLICAS"], "{who}: {table}");
        assert_eq!(rows[1][..3], ["w1", "red", "1"], "{who}: {table}");
        assert_eq!(rows[2][..3], ["w2", "blue", "2"], "{who}: {table}");
        let short = k
            .run(&["get", "wdg", "w1", "-n", &ns, "-o", "jsonpath={.spec.color}"])
            .await;
        assert_eq!(short, "red", "{who}");
        let explained = k.run(&["explain", &format!("widgets.{group}.spec")]).await;
        assert!(
            explained.contains("What the widget should be") && explained.contains("color"),
            "{who}: {explained}"
        );
        let scaled = k.run(&["scale", "widget", "w1", "--replicas=4", "-n", &ns]).await;
        assert!(
            scaled.contains(&format!("widget.{group}/w1 scaled")),
            "{who}: {scaled}"
        );
        let replicas = k
            .run(&[
                "get",
                "widget",
                "w1",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .await;
        assert_eq!(replicas, "4", "{who}");
        let edited = k
            .run_with(
                &["edit", "widget", "w1", "-n", &ns],
                &[("EDITOR", "sed -i /color:/s/red/blue/")],
            )
            .await;
        assert!(
            edited.contains(&format!("widget.{group}/w1 edited")),
            "{who}: {edited}"
        );
        let color = k
            .run(&["get", "widget", "w1", "-n", &ns, "-o", "jsonpath={.spec.color}"])
            .await;
        assert_eq!(color, "blue", "{who}");
        // A widget the schema refuses, with the apiserver's message.
        let bad = dir.join(format!("bad-{i}.yaml"));
        std::fs::write(
            &bad,
            format!("apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w3}}\nspec: {{color: pink, replicas: -1}}\n"),
        )
        .unwrap();
        let refused = k.fails(&["apply", "-n", &ns, "-f", bad.to_str().unwrap()]).await;
        for wanted in [
            "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ] {
            assert!(refused.contains(wanted), "{who}: {refused}");
        }
        // Deleting the CRD deletes its widgets, then stops serving them.
        let deleted = k.run(&["delete", "crd", &crd_name]).await;
        assert!(deleted.contains("deleted"), "{who}: {deleted}");
        // Its widgets went first; it stops being served within the controller's next round.
        let mut gone = String::new();
        for _ in 0..20 {
            let out = k
                .command(&["get", &format!("widgets.{group}"), "-n", &ns])
                .output()
                .await
                .unwrap();
            if !out.status.success() {
                gone = String::from_utf8_lossy(&out.stderr).into_owned();
                break;
            }
            let listed = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                !listed.contains("w1"),
                "{who}: a widget outlived its CRD: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            gone.contains("the server doesn't have a resource type")
                || gone.contains("the server could not find the requested resource"),
            "{who}: {gone}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    server.shutdown().await.unwrap();
}
