//! watchcache on etcd 3.4.23 served over TLS with client certificates required
//! (`--client-cert-auth`), as a kubeadm cluster runs it: the server reaches it with
//! `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`, and creates, lists and watches
//! through it; without a client certificate, or with one from another CA, or without the
//! CA, it refuses to start and says why.
//!
//! The certificates are made at each run with rcgen. A missing etcd is a loud skip, and a
//! failure under `WATCHCACHE_REQUIRE_EXTERNAL=1`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{Value, json};
use watchcache_server::Backend;
use watchcache_tests::etcd::{ClusterTls, EtcdCluster};
use watchcache_tests::{Frames, ServeConfig, Server, config, http, request};

/// A CA: its certificate's PEM and what signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::new()).expect("no names");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

/// A leaf certificate signed by `issuer`, for `names` (a serving certificate) or for a
/// client: its PEM and its key's PEM.
fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("valid names");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, issuer).expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}

/// The PEM files of one test: a CA, etcd's serving certificate, the server's client
/// certificate, and a client certificate from another CA.
struct Pki {
    dir: PathBuf,
    tls: ClusterTls,
    stranger_cert: PathBuf,
    stranger_key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        // One directory per test: tests run in parallel in one process.
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "watchcache-etcd-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let write = |name: &str, pem: &str| -> PathBuf {
            let path = dir.join(name);
            std::fs::write(&path, pem).expect("a PEM file");
            path
        };
        let (ca_pem, issuer) = ca("etcd-ca");
        let (server_cert, server_key) = leaf(
            &issuer,
            "etcd",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) = leaf(&issuer, "watchcache", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let (_, other) = ca("another-ca");
        let (stranger_cert, stranger_key) =
            leaf(&other, "watchcache", &[], ExtendedKeyUsagePurpose::ClientAuth);
        Pki {
            tls: ClusterTls {
                ca: write("ca.pem", &ca_pem),
                server_cert: write("server.pem", &server_cert),
                server_key: write("server-key.pem", &server_key),
                client_cert: write("client.pem", &client_cert),
                client_key: write("client-key.pem", &client_key),
            },
            stranger_cert: write("stranger.pem", &stranger_cert),
            stranger_key: write("stranger-key.pem", &stranger_key),
            dir,
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn on_etcd(cluster: &EtcdCluster, ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> ServeConfig {
    ServeConfig {
        etcd: cluster.endpoints(),
        etcd_cafile: ca.map(Path::to_owned),
        etcd_certfile: cert.map(Path::to_owned),
        etcd_keyfile: key.map(Path::to_owned),
        compaction_interval: Duration::ZERO,
        ..config(0)
    }
}

async fn refused(cfg: ServeConfig) -> String {
    match tokio::time::timeout(Duration::from_secs(30), Server::start(cfg)).await {
        Ok(Ok(_)) => panic!("the server started"),
        Ok(Err(e)) => e.to_string(),
        Err(_) => panic!("the server neither started nor refused within 30 s"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_creates_lists_and_watches_on_etcd_that_requires_client_certificates() {
    let pki = Pki::new();
    let Some(cluster) = EtcdCluster::start_tls(1, pki.tls.clone()).await else {
        return;
    };
    assert!(cluster.endpoints()[0].starts_with("https://"));
    let t = &pki.tls;
    let server = watchcache_tests::start(on_etcd(
        &cluster,
        Some(&t.ca),
        Some(&t.client_cert),
        Some(&t.client_key),
    ))
    .await;
    watchcache_tests::create_namespaces(&server, &["tls"]).await;
    let client = http();
    let mut watch = Frames::open(&server, "/api/v1/namespaces/tls/configmaps?watch=true").await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"v": "1"}});
    let (code, body) = request(
        &client,
        &server,
        "POST",
        "/api/v1/namespaces/tls/configmaps",
        Some(cm),
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("the watch event in time")
        .expect("an event");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "a");
    let (code, body) = request(&client, &server, "GET", "/api/v1/namespaces/tls/configmaps", None).await;
    assert_eq!(code, 200);
    let list: Value = serde_json::from_slice(&body).expect("a list");
    assert_eq!(list["items"][0]["data"]["v"], "1");
    // Written to etcd itself, under the apiserver's key.
    let Backend::Etcd(source) = server.store() else {
        panic!("the server is on etcd");
    };
    let mut etcd = source.client();
    let stored = etcd
        .get("/registry/configmaps/tls/a", None)
        .await
        .expect("etcd answers over TLS");
    assert_eq!(stored.kvs().len(), 1);
    server.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_trusted_client_certificate_or_the_ca_the_server_refuses_to_start_and_says_why() {
    let pki = Pki::new();
    let Some(cluster) = EtcdCluster::start_tls(1, pki.tls.clone()).await else {
        return;
    };
    let t = &pki.tls;
    // No client certificate: etcd refuses the handshake.
    let e = refused(on_etcd(&cluster, Some(&t.ca), None, None)).await;
    eprintln!("no client certificate: {e}");
    assert!(
        e.contains("cannot reach etcd") && e.contains(&cluster.endpoints()[0]),
        "{e}"
    );
    assert!(
        e.to_lowercase().contains("certificate"),
        "the cause is named: {e}"
    );
    // A client certificate from another CA.
    let e = refused(on_etcd(
        &cluster,
        Some(&t.ca),
        Some(&pki.stranger_cert),
        Some(&pki.stranger_key),
    ))
    .await;
    eprintln!("another CA's client certificate: {e}");
    assert!(
        e.to_lowercase().contains("certificate"),
        "the cause is named: {e}"
    );
    // No CA: refused before anything is dialled.
    let e = refused(on_etcd(&cluster, None, Some(&t.client_cert), Some(&t.client_key))).await;
    assert!(e.contains("--etcd-cafile"), "{e}");
    // The server's certificate verified against another CA.
    let e = refused(on_etcd(
        &cluster,
        Some(&pki.stranger_cert),
        Some(&t.client_cert),
        Some(&t.client_key),
    ))
    .await;
    eprintln!("etcd's certificate against the wrong CA: {e}");
    assert!(
        e.to_lowercase().contains("certificate"),
        "the cause is named: {e}"
    );
    // A file that is not there is named.
    let e = refused(on_etcd(
        &cluster,
        Some(&pki.dir.join("nope.pem")),
        Some(&t.client_cert),
        Some(&t.client_key),
    ))
    .await;
    assert!(e.contains("nope.pem"), "{e}");
}
