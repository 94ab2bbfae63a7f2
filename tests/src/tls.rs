//! Clients of the server's TLS and HTTP/2: a rustls client trusting a given CA (with a client
//! certificate, or without), an HTTP/2 connection over it or over plaintext (prior
//! knowledge), and certificates made by the test itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A directory of the test's own under the system's temporary directory, empty.
pub fn temp_dir(name: &str) -> PathBuf {
    use std::hash::{BuildHasher, RandomState};
    let suffix = RandomState::new().hash_one(std::time::SystemTime::now());
    let dir = std::env::temp_dir().join(format!("watchcache-{name}-{}-{suffix:x}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// The certificates of a PEM file.
pub fn certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .expect("a PEM file")
        .collect::<Result<_, _>>()
        .expect("PEM certificates")
}

/// A client config trusting the CA of `ca`, offering `alpn`, and presenting the certificate
/// and key of `client`, if given.
pub fn client_config(ca: &Path, client: Option<(&Path, &Path)>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs(ca) {
        roots.add(cert).expect("a CA certificate");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(certs(cert), PrivateKeyDer::from_pem_file(key).expect("a PEM key"))
            .expect("a client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` (as `127.0.0.1`), bounded in time.
pub async fn connect_tls(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("127.0.0.1").expect("a server name");
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio_rustls::TlsConnector::from(config).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("the TLS handshake timed out"))?
}

/// An HTTP/2 client connection over `io` whose streams open `window` bytes each; the
/// connection is driven by a task of its own, which ends when the connection does.
pub async fn h2_connect<IO>(
    io: IO,
    window: u32,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .initial_connection_window_size(16 << 20)
        .handshake(io)
        .await
        .expect("the HTTP/2 handshake");
    (send, tokio::spawn(conn))
}

/// A GET on an HTTP/2 connection: the status and the response's body stream.
pub async fn h2_get(
    send: &mut h2::client::SendRequest<Bytes>,
    authority: &str,
    path: &str,
) -> (u16, h2::RecvStream) {
    let request = http::Request::get(format!("https://{authority}{path}"))
        .body(())
        .expect("a request");
    let mut ready = send.clone().ready().await.expect("the connection takes a stream");
    let (response, _) = ready.send_request(request, true).expect("the request is sent");
    let response = tokio::time::timeout(Duration::from_secs(30), response)
        .await
        .expect("an answer in time")
        .expect("an answer");
    *send = ready;
    (response.status().as_u16(), response.into_body())
}

/// The rest of an HTTP/2 body, its window released as it is read.
pub async fn h2_body(body: &mut h2::RecvStream) -> Result<Bytes, h2::Error> {
    let mut all = Vec::new();
    while let Some(data) = body.data().await {
        let data = data?;
        let _ = body.flow_control().release_capacity(data.len());
        all.extend_from_slice(&data);
    }
    Ok(all.into())
}

/// A CA made by the test: its certificate in `dir/<name>.crt`, and what it signs.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Its certificate's PEM file.
    pub cert: PathBuf,
}

impl TestCa {
    pub fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.self_signed(&key).expect("a CA certificate");
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, cert.pem()).expect("written");
        TestCa {
            issuer: rcgen::Issuer::new(params, key),
            cert: path,
        }
    }

    /// A serving certificate for 127.0.0.1 and localhost: its PEM and its key's PEM.
    pub fn serving(&self, cn: &str) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("names");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate for user `cn` in the groups `orgs` (expired since 2001 if
    /// `expired`): written to `dir/<cn>.crt` and `dir/<cn>.key`, whose paths are returned.
    pub fn client(&self, dir: &Path, cn: &str, orgs: &[&str], expired: bool) -> (PathBuf, PathBuf) {
        self.client_with(dir, cn, orgs, |params| {
            params.not_after = if expired {
                rcgen::date_time_ymd(2001, 1, 1)
            } else {
                rcgen::date_time_ymd(4096, 1, 1)
            };
        })
    }

    /// As [`client`](Self::client), valid until `until` (Unix time).
    pub fn client_valid_until(
        &self,
        dir: &Path,
        cn: &str,
        orgs: &[&str],
        until: std::time::SystemTime,
    ) -> (PathBuf, PathBuf) {
        let since_epoch = until.duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        self.client_with(dir, cn, orgs, |params| {
            params.not_after = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
        })
    }

    fn client_with(
        &self,
        dir: &Path,
        cn: &str,
        orgs: &[&str],
        validity: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> (PathBuf, PathBuf) {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        validity(&mut params);
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let (cert_path, key_path) = (dir.join(format!("{cn}.crt")), dir.join(format!("{cn}.key")));
        std::fs::write(&cert_path, cert.pem()).expect("written");
        std::fs::write(&key_path, key.serialize_pem()).expect("written");
        (cert_path, key_path)
    }
}
