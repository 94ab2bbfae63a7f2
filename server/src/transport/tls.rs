//! TLS on rustls (the `ring` provider): the serving certificate and the client CA read from
//! their files and read again when the files change (`reload.rs`), ALPN offering `h2` and
//! `http/1.1`, and a client certificate asked for but not required (`client_cert.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;

use super::client_cert::{ClientCa, PeerCert, ProvenKey};
use crate::transport::connection::PeerCertificate;

/// ALPN's name for HTTP/2.
pub(crate) const H2: &[u8] = b"h2";

/// Where the serving certificate and the client CA are read from.
#[derive(Clone, Debug)]
pub(crate) struct TlsFiles {
    /// The serving certificate chain, PEM.
    pub(crate) cert: PathBuf,
    /// Its private key, PEM.
    pub(crate) key: PathBuf,
    /// The CA client certificates must chain to, PEM; none: no client certificate is asked
    /// for.
    pub(crate) client_ca: Option<PathBuf>,
}

/// The server's TLS: what accepts handshakes, and the client CA of the moment.
pub(crate) struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    client_ca: Option<Arc<super::reload::Reloading<ClientCa>>>,
}

/// The certificates of a PEM file, in order.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}

fn certified_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = read_certs(&files.cert)?;
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| format!("{}: {e}", files.key.display()))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("{} and {}: {e}", files.cert.display(), files.key.display()))
}

/// The serving certificate, read again when its files change.
#[derive(Debug)]
struct ServingCert(super::reload::Reloading<CertifiedKey>);

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.get())
    }
}

impl Tls {
    /// Reads the files now: an error names the file that could not be used.
    pub(crate) fn new(files: &TlsFiles) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let serving = {
            let (files, provider) = (files.clone(), Arc::clone(&provider));
            super::reload::Reloading::new(vec![files.cert.clone(), files.key.clone()], move || {
                certified_key(&files, &provider)
            })?
        };
        let client_ca = match &files.client_ca {
            Some(path) => {
                let (p, provider) = (path.clone(), Arc::clone(&provider));
                Some(Arc::new(super::reload::Reloading::new(
                    vec![path.clone()],
                    move || ClientCa::from_pem_file(&p, &provider),
                )?))
            }
            None => None,
        };
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match client_ca {
            Some(_) => builder.with_client_cert_verifier(Arc::new(ProvenKey::new(&provider))),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(ServingCert(serving)));
        config.alpn_protocols = vec![H2.to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            client_ca,
        })
    }

    /// The handshake (unbounded: the caller bounds it); the stream, whether ALPN chose
    /// HTTP/2, and the client's certificate (if it presented one to a client CA), checked
    /// against the client CA of now and again at each request when that may have changed.
    pub(crate) async fn accept<IO>(
        &self,
        io: IO,
    ) -> std::io::Result<(TlsStream<IO>, bool, Option<Arc<dyn PeerCertificate>>)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = self.acceptor.accept(io).await?;
        let (_, session) = stream.get_ref();
        let h2 = session.alpn_protocol() == Some(H2);
        let cert = match (session.peer_certificates(), &self.client_ca) {
            (Some(chain), Some(ca)) if !chain.is_empty() => {
                let chain = chain.iter().map(|c| c.clone().into_owned()).collect();
                Some(Arc::new(PeerCert::new(chain, Arc::clone(ca))) as Arc<dyn PeerCertificate>)
            }
            _ => None,
        };
        Ok((stream, h2, cert))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ClientCert;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use rustls_pki_types::ServerName;

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names` (or a client certificate of `cn`), PEM, and its key.
    fn signed(ca: &Ca, names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        (
            params.signed_by(&key, &ca.issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    }

    /// A handshake over an in-memory pipe, the client presenting `client` if given: what the
    /// server learned of its certificate.
    async fn handshake(tls: &Tls, server_ca: &str, client: Option<&(String, String)>) -> ClientCert {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from("localhost").unwrap();
        let (client, server) = tokio::join!(connector.connect(name, a), tls.accept(b));
        client.expect("the client's handshake");
        let (_, h2, cert) = server.expect("the server's handshake");
        assert!(!h2, "no ALPN offered: HTTP/1.1");
        cert.map_or(ClientCert::None, |c| c.now())
    }

    #[tokio::test]
    async fn a_client_certificate_is_checked_against_the_client_ca_of_the_moment() {
        let dir = std::env::temp_dir().join(format!("watchcache-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (serving_ca, client_ca, other_ca) = (ca("serving"), ca("clients"), ca("other"));
        let (cert, key) = signed(
            &serving_ca,
            vec!["localhost".into()],
            "server",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let files = TlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: Some(dir.join("client-ca.crt")),
        };
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
        std::fs::write(files.client_ca.as_ref().unwrap(), &client_ca.pem).unwrap();
        let tls = Tls::new(&files).unwrap();
        let jane = signed(&client_ca, vec![], "jane", ExtendedKeyUsagePurpose::ClientAuth);
        let ClientCert::Valid(user) = handshake(&tls, &serving_ca.pem, Some(&jane)).await else {
            panic!("jane's certificate is valid")
        };
        assert_eq!(user.name, "jane");
        assert!(matches!(
            handshake(&tls, &serving_ca.pem, None).await,
            ClientCert::None
        ));
        let mallory = signed(&other_ca, vec![], "mallory", ExtendedKeyUsagePurpose::ClientAuth);
        assert!(
            matches!(
                handshake(&tls, &serving_ca.pem, Some(&mallory)).await,
                ClientCert::Invalid(_)
            ),
            "a certificate of another CA completes the handshake, and is invalid"
        );
        // The client CA is replaced: the next handshakes are checked against the new one.
        std::thread::sleep(super::super::reload::CHECK_EVERY);
        std::fs::write(files.client_ca.as_ref().unwrap(), &other_ca.pem).unwrap();
        assert!(matches!(
            handshake(&tls, &serving_ca.pem, Some(&mallory)).await,
            ClientCert::Valid(_)
        ));
        assert!(matches!(
            handshake(&tls, &serving_ca.pem, Some(&jane)).await,
            ClientCert::Invalid(_)
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
