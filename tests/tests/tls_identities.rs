//! Identities over TLS: the admin's client certificate (`--cert-dir`), a bearer token of
//! `--token-auth-file`, and no credentials at all, under RBAC, as every kubectl build on the
//! image, the official Python client and kube-rs (rustls) meet them; and what is refused (a bad
//! token, a certificate of a foreign CA, an expired certificate) refused with 401 and nothing
//! written. Needs kubectl and the Python client; says so loudly when they are missing and fails
//! under WATCHCACHE_REQUIRE_EXTERNAL=1.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use watchcache_server::auth::AuthorizationMode;
use watchcache_tests::tls::{TestCa, client_config, connect_tls, h2_connect, h2_get, temp_dir};
use watchcache_tests::{ServeConfig, Server, config, kubectl_every_build, missing};

const ALICE: &str = "alice-token-0123456789";
const ROOT: &str = "root-token-0123456789";

/// Who a request is from.
#[derive(Clone, Copy)]
enum Who<'a> {
    /// The admin certificate of the cert dir (O=system:masters).
    Admin,
    /// `Authorization: Bearer <token>`.
    Token(&'a str),
    /// A client certificate and its key.
    Cert(&'a Path, &'a Path),
    /// No credentials.
    Nobody,
}

/// A server on TLS with the certificates of `dir`, RBAC on the stored (bootstrap) policy, the
/// tokens of alice and of root (system:masters), and anonymous requests as `anonymous`.
async fn start_tls(dir: &Path, anonymous: bool, client_ca: Option<PathBuf>) -> Server {
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        format!("{ALICE},alice,1001\n{ROOT},root,1000,system:masters\n"),
    )
    .expect("the token file is written");
    let server = Server::start(ServeConfig {
        cert_dir: Some(dir.to_owned()),
        client_ca_file: client_ca,
        token_auth_file: Some(tokens),
        anonymous_auth: anonymous,
        authorization_mode: AuthorizationMode::Rbac,
        ..config(0)
    })
    .await
    .expect("the server starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = https(&server, dir, Who::Token(ROOT), "GET", "/readyz", None).await;
        if code == 200 {
            return server;
        }
        assert!(Instant::now() < deadline, "ready in time: {code} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One request over TLS (HTTP/1.1) as `who`: the code and the answer as JSON (or as a string,
/// when it is not JSON).
async fn https(
    server: &Server,
    dir: &Path,
    who: Who<'_>,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (admin_crt, admin_key) = (dir.join("admin.crt"), dir.join("admin.key"));
    let cert = match who {
        Who::Admin => Some((admin_crt.as_path(), admin_key.as_path())),
        Who::Cert(c, k) => Some((c, k)),
        Who::Token(_) | Who::Nobody => None,
    };
    let tls = client_config(&dir.join("ca.crt"), cert, &[b"http/1.1"]);
    let io = connect_tls(server.addr(), tls).await.expect("a TLS connection");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("the HTTP/1.1 handshake");
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", server.addr().to_string())
        .header("content-type", "application/json");
    if let Who::Token(token) = who {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let resp = tokio::time::timeout(
        Duration::from_secs(30),
        send.send_request(req.body(Full::new(body)).expect("a request")),
    )
    .await
    .expect("an answer in time")
    .expect("the request is sent");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("the body").to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (code, value)
}

/// Runs a command to its end, bounded in time.
async fn output(mut command: tokio::process::Command, what: &str) -> Output {
    tokio::time::timeout(Duration::from_secs(60), command.kill_on_drop(true).output())
        .await
        .unwrap_or_else(|_| panic!("{what} timed out"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// kubectl `bin` as someone: the admin's kubeconfig, or a server URL with the CA and a token
/// (or none).
struct Kubectl<'a> {
    bin: &'a Path,
    cache: PathBuf,
    /// `--kubeconfig=…` or `--server=… --certificate-authority=… [--token=…]`.
    identity: Vec<String>,
}

impl<'a> Kubectl<'a> {
    fn admin(bin: &'a Path, dir: &Path, cache: PathBuf) -> Self {
        let kubeconfig = dir.join("admin.kubeconfig");
        Kubectl {
            bin,
            cache,
            identity: vec![format!("--kubeconfig={}", kubeconfig.display())],
        }
    }

    fn with_token(bin: &'a Path, server: &Server, dir: &Path, cache: PathBuf, token: Option<&str>) -> Self {
        let mut identity = vec![
            format!("--server=https://{}", server.addr()),
            format!("--certificate-authority={}", dir.join("ca.crt").display()),
        ];
        identity.extend(token.map(|t| format!("--token={t}")));
        Kubectl { bin, cache, identity }
    }

    async fn output(&self, args: &[&str]) -> Output {
        let mut c = tokio::process::Command::new(self.bin);
        c.env("KUBECONFIG", "/dev/null")
            .args(&self.identity)
            .arg(format!("--cache-dir={}", self.cache.display()))
            .args(args);
        output(c, &format!("{} {args:?}", self.bin.display())).await
    }

    /// Runs to completion; stdout; fails on a non-zero exit.
    async fn run(&self, args: &[&str]) -> String {
        let out = self.output(args).await;
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}",
            self.bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Runs, expecting exit code 1; stderr.
    async fn refused(&self, args: &[&str]) -> String {
        let out = self.output(args).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{} {args:?}: {} {stderr}",
            self.bin.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_build_acts_as_the_admin_a_token_user_and_anonymous_over_tls_under_rbac() {
    let builds = kubectl_every_build();
    if builds.is_empty() {
        return;
    }
    let dir = temp_dir("tls-identities-kubectl");
    let server = start_tls(&dir, true, None).await;
    for (i, bin) in builds.iter().enumerate() {
        let who = bin.display();
        let (dev, prod) = (format!("dev-{i}"), format!("prod-{i}"));
        let admin = Kubectl::admin(bin, &dir, dir.join(format!("cache-admin-{i}")));
        let alice = Kubectl::with_token(
            bin,
            &server,
            &dir,
            dir.join(format!("cache-alice-{i}")),
            Some(ALICE),
        );

        // The admin (client certificate, system:masters) sets up the namespaces and alice's
        // role in dev.
        for ns in [&dev, &prod] {
            let out = admin.run(&["create", "namespace", ns]).await;
            assert_eq!(out.trim(), format!("namespace/{ns} created"), "{who}");
        }
        let out = admin
            .run(&[
                "create",
                "role",
                "cm-editor",
                "--verb=get,list,watch,create,delete",
                "--resource=configmaps",
                "-n",
                &dev,
            ])
            .await;
        assert_eq!(
            out.trim(),
            "role.rbac.authorization.k8s.io/cm-editor created",
            "{who}"
        );
        let out = admin
            .run(&[
                "create",
                "rolebinding",
                "alice-cm",
                "--role=cm-editor",
                "--user=alice",
                "-n",
                &dev,
            ])
            .await;
        assert_eq!(
            out.trim(),
            "rolebinding.rbac.authorization.k8s.io/alice-cm created",
            "{who}"
        );

        // alice (a bearer token, over TLS): what the binding grants, once the policy has seen
        // it.
        let deadline = Instant::now() + Duration::from_secs(10);
        let created = loop {
            let out = alice
                .output(&[
                    "create",
                    "configmap",
                    "settings",
                    "--from-literal=mode=dev",
                    "-n",
                    &dev,
                ])
                .await;
            if out.status.success() {
                break String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                Instant::now() < deadline,
                "{who}: alice may create configmaps in {dev}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(created.trim(), "configmap/settings created", "{who}");
        let mode = alice
            .run(&[
                "get",
                "configmap",
                "settings",
                "-n",
                &dev,
                "-o",
                "jsonpath={.data.mode}",
            ])
            .await;
        assert_eq!(mode, "dev", "{who}");
        let names = alice.run(&["get", "configmaps", "-n", &dev, "-o", "name"]).await;
        assert!(names.lines().any(|l| l == "configmap/settings"), "{who}: {names}");
        // ... and not in prod, in the apiserver's words.
        let stderr = alice.refused(&["get", "configmaps", "-n", &prod]).await;
        assert!(
            stderr.contains(&format!(
                "Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"{prod}\""
            )),
            "{who}: {stderr}"
        );
        let stderr = alice.refused(&["create", "configmap", "nope", "-n", &prod]).await;
        assert!(
            stderr.contains(&format!(
                "error: failed to create configmap: configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{prod}\""
            )),
            "{who}: {stderr}"
        );

        // kubectl auth can-i, with the token over TLS.
        for (args, yes) in [
            (&["auth", "can-i", "create", "configmaps", "-n", &dev][..], true),
            (&["auth", "can-i", "delete", "configmaps", "-n", &dev][..], true),
            (&["auth", "can-i", "update", "configmaps", "-n", &dev][..], false),
            (&["auth", "can-i", "create", "configmaps", "-n", &prod][..], false),
            (&["auth", "can-i", "list", "pods", "-n", &dev][..], false),
        ] {
            let out = alice.output(args).await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                (stdout.trim(), out.status.code()),
                (if yes { "yes" } else { "no" }, Some(if yes { 0 } else { 1 })),
                "{who} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list = alice.run(&["auth", "can-i", "--list", "-n", &dev]).await;
        let rule = list
            .lines()
            .find(|l| l.starts_with("configmaps "))
            .unwrap_or_else(|| panic!("{who}: a configmaps rule in {list}"));
        assert!(
            rule.trim_end().ends_with("[get list watch create delete]"),
            "{who}: {rule}"
        );
        let list = alice.run(&["auth", "can-i", "--list", "-n", &prod]).await;
        assert!(
            !list.lines().any(|l| l.starts_with("configmaps ")),
            "{who}: {list}"
        );

        // A token the file does not hold: 401, never demoted to system:anonymous.
        let stale = Kubectl::with_token(
            bin,
            &server,
            &dir,
            dir.join(format!("cache-bad-{i}")),
            Some("no-such-token"),
        );
        let stderr = stale.refused(&["get", "pods"]).await;
        // The 401 of discovery (its Status unread: client-go's words) or of the list.
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            [
                "error: You must be logged in to the server (the server has asked for the client to provide credentials)",
                "error: You must be logged in to the server (Unauthorized)",
            ]
            .contains(&last),
            "{who}: {stderr}"
        );
    }
    // No credentials at all (the CA only) is system:anonymous, whom RBAC grants nothing.
    // (Not with kubectl: with no user over TLS, client-go's interactive client config asks
    // for a username and a password on a terminal, and without one kubectl ends with
    // "error: EOF" before it sends anything.)
    let (code, body) = https(
        &server,
        &dir,
        Who::Nobody,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"",
        "{body}"
    );
    server.shutdown().await.expect("a clean shutdown");

    // Anonymous requests off: no credentials is a 401.
    let dir_off = temp_dir("tls-identities-kubectl-off");
    let server = start_tls(&dir_off, false, None).await;
    let (code, body) = https(
        &server,
        &dir_off,
        Who::Nobody,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
    )
    .await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(
        (&body["reason"], &body["message"]),
        (&json!("Unauthorized"), &json!("Unauthorized")),
        "{body}"
    );
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir_off);
}

/// The names of the configmaps in `ns`, as root sees them.
async fn configmaps(server: &Server, dir: &Path, ns: &str) -> Vec<String> {
    let (code, list) = https(
        server,
        dir,
        Who::Token(ROOT),
        "GET",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{list}");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_a_foreign_certificate_and_an_expired_one_are_401_over_tls_and_write_nothing() {
    let dir = temp_dir("tls-identities-refusals");
    // Client certificates of a CA of the test's own; the server's own CA signs none.
    let clients = TestCa::new(&dir, "clients");
    let foreign = TestCa::new(&dir, "foreign");
    let (good_crt, good_key) = clients.client(&dir, "carol", &["system:masters"], false);
    let (expired_crt, expired_key) = clients.client(&dir, "dave", &["system:masters"], true);
    let (foreign_crt, foreign_key) = foreign.client(&dir, "mallory", &["system:masters"], false);
    let server = start_tls(&dir, true, Some(clients.cert.clone())).await;
    let (code, body) = https(
        &server,
        &dir,
        Who::Token(ROOT),
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "refusals"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let path = "/api/v1/namespaces/refusals/configmaps";
    let cm = |name: &str| Some(json!({"metadata": {"name": name}, "data": {"k": "v"}}));

    for (what, who) in [
        ("a bad token", Who::Token("not-a-token-of-the-file")),
        (
            "a certificate of a foreign CA",
            Who::Cert(&foreign_crt, &foreign_key),
        ),
        ("an expired certificate", Who::Cert(&expired_crt, &expired_key)),
    ] {
        let (code, body) = https(&server, &dir, who, "POST", path, cm("refused")).await;
        assert_eq!(code, 401, "{what}: {body}");
        assert_eq!(body["kind"], "Status", "{what}: {body}");
        assert_eq!(body["reason"], "Unauthorized", "{what}: {body}");
        assert_eq!(body["message"], "Unauthorized", "{what}: {body}");
        assert_eq!(body["code"], 401, "{what}: {body}");
        // The server's own `kube-root-ca.crt` may come meanwhile; nothing of the request's.
        let names = configmaps(&server, &dir, "refusals").await;
        assert!(
            names.iter().all(|n| n == "kube-root-ca.crt"),
            "{what}: nothing is written: {names:?}"
        );
    }
    // Where no credentials are anonymous, credentials that fail are still a 401: the
    // request is refused, not demoted to system:anonymous.
    let (code, body) = https(&server, &dir, Who::Nobody, "POST", path, cm("anonymous")).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "configmaps is forbidden: User \"system:anonymous\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"refusals\"",
        "{body}"
    );
    // The certificate of the client CA, in time, is carol of system:masters.
    let (code, body) = https(
        &server,
        &dir,
        Who::Cert(&good_crt, &good_key),
        "POST",
        path,
        cm("carols"),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let mut names = configmaps(&server, &dir, "refusals").await;
    names.retain(|n| n != "kube-root-ca.crt");
    assert_eq!(names, ["carols"]);
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}

/// An HTTP/1.1 connection over TLS as `cert` (with its key), kept open for several requests.
async fn kept_connection(
    server: &Server,
    dir: &Path,
    cert: (&Path, &Path),
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let tls = client_config(&dir.join("ca.crt"), Some(cert), &[b"http/1.1"]);
    let io = connect_tls(server.addr(), tls).await.expect("a TLS connection");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("the HTTP/1.1 handshake");
    tokio::spawn(conn);
    send
}

/// The code of a `GET /api` on a kept connection.
async fn get_api(send: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>) -> u16 {
    let req = http::Request::get("/api")
        .header("host", "x")
        .body(Full::default())
        .expect("a request");
    let resp = tokio::time::timeout(Duration::from_secs(30), send.send_request(req))
        .await
        .expect("an answer in time")
        .expect("the connection is still open");
    let code = resp.status().as_u16();
    resp.into_body().collect().await.expect("the body");
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_stops_authenticating_its_open_connection_once_it_expires_or_its_ca_is_replaced() {
    let dir = temp_dir("tls-identities-lapse");
    let clients = TestCa::new(&dir, "clients");
    let other = TestCa::new(&dir, "other");
    // The client CA file, which the test replaces.
    let client_ca = dir.join("client-ca.crt");
    std::fs::copy(&clients.cert, &client_ca).expect("copied");
    let lapse = std::time::SystemTime::now() + Duration::from_secs(4);
    let (erin_crt, erin_key) = clients.client_valid_until(&dir, "erin", &["system:masters"], lapse);
    let (carol_crt, carol_key) = clients.client(&dir, "carol", &["system:masters"], false);
    let server = start_tls(&dir, true, Some(client_ca.clone())).await;
    let mut erin = kept_connection(&server, &dir, (&erin_crt, &erin_key)).await;
    let mut carol = kept_connection(&server, &dir, (&carol_crt, &carol_key)).await;
    assert_eq!(get_api(&mut erin).await, 200, "erin, in time");
    assert_eq!(get_api(&mut carol).await, 200, "carol");
    // Erin's certificate expires: her connection's next request is refused.
    while std::time::SystemTime::now() < lapse + Duration::from_millis(1500) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get_api(&mut erin).await, 401, "erin's certificate has expired");
    assert_eq!(get_api(&mut carol).await, 200, "carol's has not");
    // The client CA is replaced by one that did not sign carol's: her connection's next
    // requests are refused, once the file is read again (within a second or two).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::copy(&other.cert, &client_ca).expect("replaced");
    let mut refused = false;
    for _ in 0..100 {
        if get_api(&mut carol).await == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "carol's certificate is refused on her open connection");
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}

/// Waits (bounded) for `kube-root-ca.crt` in `ns`; returns its `ca.crt`.
async fn root_ca_of(server: &Server, dir: &Path, ns: &str) -> String {
    let path = format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, cm) = https(server, dir, Who::Token(ROOT), "GET", &path, None).await;
        if code == 200 {
            return cm["data"]["ca.crt"]
                .as_str()
                .unwrap_or_else(|| panic!("a ca.crt: {cm}"))
                .to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no kube-root-ca.crt in {ns}: {code} {cm}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every namespace gets `kube-root-ca.crt`, as kube-controller-manager's root CA publisher
/// makes it: the CA a pod verifies the server with. A new namespace gets it, one deleted comes
/// back, and the bundle it holds verifies the server's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_gets_kube_root_ca_crt_and_it_verifies_the_server() {
    let dir = temp_dir("tls-identities-root-ca");
    let server = start_tls(&dir, false, None).await;
    let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("the cert dir's CA");
    assert_eq!(root_ca_of(&server, &dir, "default").await.trim(), ca.trim());
    let (code, out) = https(
        &server,
        &dir,
        Who::Token(ROOT),
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "fresh"}})),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let published = root_ca_of(&server, &dir, "fresh").await;
    let path = "/api/v1/namespaces/fresh/configmaps/kube-root-ca.crt";
    let (code, out) = https(&server, &dir, Who::Token(ROOT), "DELETE", path, None).await;
    assert_eq!(code, 200, "{out}");
    assert_eq!(root_ca_of(&server, &dir, "fresh").await, published, "made again");
    // A client that trusts only the published bundle reaches the server.
    let bundle = dir.join("published-ca.crt");
    std::fs::write(&bundle, &published).expect("written");
    let tls = client_config(&bundle, None, &[b"http/1.1"]);
    assert!(
        connect_tls(server.addr(), tls).await.is_ok(),
        "the published CA verifies the server"
    );
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_lists_writes_reads_and_watches_over_tls_with_a_bearer_token() {
    let has_client = std::process::Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_client {
        missing("the Python kubernetes client (python3 -m pip install kubernetes)");
        return;
    }
    let dir = temp_dir("tls-identities-python");
    let server = start_tls(&dir, false, None).await;
    let (code, body) = https(
        &server,
        &dir,
        Who::Admin,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "py"}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/tls_token_test.py");
    let mut command = tokio::process::Command::new("python3");
    command
        .arg(script)
        .arg(format!("https://{}", server.addr()))
        .arg(dir.join("ca.crt"))
        .arg(ROOT)
        .arg("py");
    let out = tokio::time::timeout(Duration::from_secs(120), command.kill_on_drop(true).output())
        .await
        .expect("the Python client finishes in time")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tls_token_test.py failed:\n{stdout}\n{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let namespaces = lines
        .iter()
        .find_map(|l| l.strip_prefix("namespaces: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    for ns in ["default", "kube-system", "py"] {
        assert!(namespaces.split(',').any(|n| n == ns), "{ns} in {namespaces}");
    }
    assert!(lines.contains(&"created: py-tls uid=True"), "{stdout}");
    assert!(lines.contains(&"read: py-tls via=tls"), "{stdout}");
    assert!(
        lines.contains(&"watched: ADDED py-tls,ADDED py-tls-2"),
        "{stdout}"
    );
    assert_eq!(lines.last(), Some(&"python tls: ok"), "{stdout}");
    // Written as root (the token's user), whom the server knows only from the token.
    let (code, cm) = https(
        &server,
        &dir,
        Who::Admin,
        "GET",
        "/api/v1/namespaces/py/configmaps/py-tls",
        None,
    )
    .await;
    assert_eq!(code, 200, "{cm}");
    assert_eq!(cm["data"]["via"], "tls");
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether `cond` holds within 30 s.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// kube-rs with its `rustls-tls` feature, from the `admin.kubeconfig` of `--cert-dir` (the CA
/// and the admin's client certificate): a watcher on configmaps and a controller of
/// configmaps that watches the secrets they own, all over the one `Client`.
///
/// kube 5 speaks HTTP/1.1 only: its connector (`ConfigExt::rustls_https_connector`) enables
/// hyper-rustls' HTTP/1 alone, so it offers only `http/1.1` by ALPN, and each watch is a
/// connection of its own. The test asserts that: the HTTP/2 gauges stay at zero while its
/// watches run. The gauges themselves are asserted with the h2 client below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_watches_and_runs_a_controller_over_tls_with_the_admin_certificate() {
    // kube's connector takes the process's default provider (it installs one itself only
    // with its aws-lc-rs feature).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = temp_dir("tls-identities-kube");
    let server = start_tls(&dir, false, None).await;
    let kubeconfig =
        kube::config::Kubeconfig::read_from(dir.join("admin.kubeconfig")).expect("the kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .expect("a config");
    assert_eq!(config.cluster_url.scheme_str(), Some("https"));
    let client = Client::try_from(config).expect("a client");
    let ns = "kube";
    let (code, body) = https(
        &server,
        &dir,
        Who::Admin,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": ns}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    // A watcher of configmaps: the names it sees applied.
    let watched = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watching = {
        let watched = Arc::clone(&watched);
        let stream = watcher::watcher(cms.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(cm) = stream.next().await {
                watched
                    .lock()
                    .unwrap()
                    .push(cm.expect("the watch goes on").name_any());
            }
        })
    };
    // A controller of configmaps that owns secrets: a configmap is reconciled when it changes
    // and when a secret it owns does. kube watches the owned secrets with its metadata
    // watcher (`application/json;as=PartialObjectMetadataList`, then `as=PartialObjectMetadata`
    // for the watch).
    let reconciled = Arc::new(AtomicUsize::new(0));
    let controller = {
        let reconciled = Arc::clone(&reconciled);
        let run = Controller::new(cms.clone(), watcher::Config::default())
            .owns(secrets.clone(), watcher::Config::default())
            .run(
                |cm: Arc<ConfigMap>, seen: Arc<AtomicUsize>| async move {
                    if cm.name_any() == "owner" {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, kube::Error>(Action::await_change())
                },
                |_: Arc<ConfigMap>, _: &kube::Error, _: Arc<AtomicUsize>| {
                    Action::requeue(Duration::from_secs(1))
                },
                reconciled,
            )
            .for_each(|_| async {});
        tokio::spawn(run)
    };

    let owner = cms
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .expect("the configmap is created");
    assert!(
        eventually(|| watched.lock().unwrap().iter().any(|n| n == "owner")).await,
        "the watcher sees the configmap"
    );
    assert!(
        eventually(|| reconciled.load(Ordering::SeqCst) >= 1).await,
        "the controller reconciles the configmap"
    );
    let before = reconciled.load(Ordering::SeqCst);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("owned".into()),
                    owner_references: Some(vec![owner.controller_owner_ref(&()).expect("an owner ref")]),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            },
        )
        .await
        .expect("the secret is created");
    assert!(
        eventually(|| reconciled.load(Ordering::SeqCst) > before).await,
        "the owned secret's watch brings the configmap back to the controller"
    );
    // Three watches ran (the watcher, the controller's two), over HTTP/1.1.
    let metrics = server.metrics();
    let watchers = metrics.render();
    assert!(
        watchers.contains("watchcache_watchers{resource=\"configmaps\"} 2")
            && watchers.contains("watchcache_watchers{resource=\"secrets\"} 1"),
        "{watchers}"
    );
    assert_eq!(metrics.http2_connections.get(), 0, "kube 5 speaks HTTP/1.1");
    assert_eq!(metrics.http2_streams.get(), 0, "kube 5 speaks HTTP/1.1");
    watching.abort();
    controller.abort();
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}

/// The line of `/metrics` for `name`'s value.
fn metric(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {text}"))
}

/// 100 watches on one HTTP/2 connection over TLS (the admin's certificate): the gauges of
/// `/metrics` count 1 connection and 100 streams while they run, and 0 and 0 once the
/// connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http2_gauges_count_100_watches_as_streams_of_one_connection() {
    let dir = temp_dir("tls-identities-h2");
    let server = start_tls(&dir, false, None).await;
    let tls = client_config(
        &dir.join("ca.crt"),
        Some((&dir.join("admin.crt"), &dir.join("admin.key"))),
        &[b"h2"],
    );
    let io = connect_tls(server.addr(), tls).await.expect("a TLS connection");
    let (mut send, conn) = h2_connect(io, 64 * 1024).await;
    let authority = server.addr().to_string();
    let mut bodies = Vec::new();
    for _ in 0..100 {
        let (code, body) = h2_get(
            &mut send,
            &authority,
            "/api/v1/configmaps?watch=1&timeoutSeconds=60",
        )
        .await;
        assert_eq!(code, 200);
        bodies.push(body);
    }
    // Read through the server's own /metrics, on a stream of the same connection (the 101st).
    let (code, mut body) = h2_get(&mut send, &authority, "/metrics").await;
    assert_eq!(code, 200);
    let text = watchcache_tests::tls::h2_body(&mut body)
        .await
        .expect("the metrics");
    let text = String::from_utf8_lossy(&text);
    assert_eq!(metric(&text, "watchcache_http2_connections"), 1, "{text}");
    assert_eq!(metric(&text, "watchcache_http2_streams"), 101, "{text}");
    let metrics = server.metrics();
    assert!(
        eventually(|| metrics.http2_streams.get() == 100).await,
        "the metrics stream is done: {}",
        metrics.http2_streams.get()
    );
    // Ten watches reset by the client: their streams end.
    for body in bodies.drain(..10) {
        drop(body);
    }
    assert!(
        eventually(|| metrics.http2_streams.get() == 90).await,
        "reset streams are uncounted: {}",
        metrics.http2_streams.get()
    );
    // The client goes: its socket closes with 90 watches open.
    drop(bodies);
    drop(send);
    conn.abort();
    assert!(
        eventually(|| metrics.http2_connections.get() == 0 && metrics.http2_streams.get() == 0).await,
        "a closed connection is uncounted with its streams: {} {}",
        metrics.http2_connections.get(),
        metrics.http2_streams.get()
    );
    server.shutdown().await.expect("a clean shutdown");
    let _ = std::fs::remove_dir_all(dir);
}
