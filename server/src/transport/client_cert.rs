//! Client certificates: the handshake accepts any certificate whose key the client proves it
//! holds ([`ProvenKey`]); once the handshake ends, the chain is verified against the client
//! CA of that moment ([`ClientCa::check`]) and read into a user: the subject's CN is the
//! name, each O a group, as kube-apiserver's x509 authenticator reads it. A certificate that
//! does not verify is [`ClientCert::Invalid`], which authentication answers with a 401 rather
//! than the handshake with an alert.
//!
//! A connection keeps its client's chain ([`PeerCert`]) and checks it again when its answer may
//! have changed: once the earliest `notAfter` of the chain or of the CA certificate it verified
//! against has passed (a certificate that expires while its connection is open stops
//! authenticating the connection's next requests, as a new connection would be refused), once
//! the `notBefore` of a chain refused as not valid yet has come, and when the client CA has
//! been read again (a certificate the new CA does not verify stops authenticating too). A CA
//! certificate authenticates only within its own validity, as Go's x509 verification has it.

use std::sync::{Arc, Mutex};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use super::reload::Reloading;
use crate::auth::{ClientCert, UserInfo};
use crate::transport::connection::PeerCertificate;

/// Accepts any client certificate and checks only that the client holds its key (the
/// handshake's signature, with the provider's algorithms). Asks for a certificate without
/// requiring one, and names no CA, so that clients offer the one they have.
#[derive(Debug)]
pub(crate) struct ProvenKey {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ProvenKey {
    pub(crate) fn new(provider: &CryptoProvider) -> Self {
        ProvenKey {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for ProvenKey {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Verified against the client CA when the handshake ends (`ClientCa::check`).
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client CA: what client certificates must chain to. Each CA certificate is a trust
/// anchor of its own, with its validity: webpki checks no anchor's dates, and Go's x509 (the
/// apiserver's) refuses a chain whose root has expired or is not valid yet, so a chain is
/// verified against the anchors valid at the moment only.
#[derive(Debug)]
pub(crate) struct ClientCa {
    anchors: Vec<Anchor>,
}

/// One CA certificate of the client CA.
#[derive(Debug)]
struct Anchor {
    verifier: Arc<dyn ClientCertVerifier>,
    /// Its `notBefore` and `notAfter`, Unix seconds.
    not_before: u64,
    not_after: u64,
}

impl ClientCa {
    /// From the CA certificates of a PEM file.
    pub(crate) fn from_pem_file(
        path: &std::path::Path,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, String> {
        ClientCa::from_roots(super::tls::read_certs(path)?, provider)
    }

    /// From CA certificates.
    pub(crate) fn from_roots(
        roots: Vec<CertificateDer<'static>>,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Self, String> {
        let build = |store: RootCertStore| {
            WebPkiClientVerifier::builder_with_provider(Arc::new(store), Arc::clone(provider))
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("cannot verify client certificates: {e}"))
        };
        if roots.is_empty() {
            // Refused as before, with the builder's words.
            build(RootCertStore::empty())?;
        }
        let mut anchors = Vec::with_capacity(roots.len());
        for root in roots {
            let (not_before, not_after) = validity(&root).unwrap_or((0, u64::MAX));
            let mut store = RootCertStore::empty();
            store
                .add(root)
                .map_err(|e| format!("not a CA certificate: {e}"))?;
            anchors.push(Anchor {
                verifier: build(store)?,
                not_before,
                not_after,
            });
        }
        Ok(ClientCa { anchors })
    }

    /// What a presented chain (end entity first) proves, now.
    #[cfg(test)]
    pub(crate) fn check(&self, chain: &[CertificateDer<'_>]) -> ClientCert {
        self.check_at(chain, UnixTime::now()).0
    }

    /// What `chain` proves at `now`, and, for a chain that verifies, the `notAfter` of the
    /// anchor it verified against.
    fn check_at(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> (ClientCert, Option<u64>) {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return (ClientCert::None, None);
        };
        let secs = now.as_secs();
        let mut refused = None;
        let mut outside = None;
        for anchor in &self.anchors {
            match anchor.verifier.verify_client_cert(end_entity, intermediates, now) {
                Err(e) => {
                    refused.get_or_insert(e);
                }
                Ok(_) if secs < anchor.not_before => {
                    outside.get_or_insert("its CA certificate is not valid yet");
                }
                Ok(_) if secs > anchor.not_after => {
                    outside.get_or_insert("its CA certificate has expired");
                }
                Ok(_) => {
                    let cert = match user(end_entity) {
                        Ok(user) => ClientCert::Valid(Arc::new(user)),
                        Err(e) => ClientCert::Invalid(e.into()),
                    };
                    return (cert, Some(anchor.not_after));
                }
            }
        }
        let why = match (outside, refused) {
            (Some(why), _) => why.to_owned(),
            (None, Some(e)) => e.to_string(),
            (None, None) => "no client CA".to_owned(),
        };
        let why = format!("the client certificate does not verify: {why}");
        (ClientCert::Invalid(why.into()), None)
    }
}

/// A certificate's `notBefore` and `notAfter`, Unix seconds.
fn validity(cert: &CertificateDer<'_>) -> Option<(u64, u64)> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let v = cert.validity();
    Some((
        v.not_before.timestamp().max(0) as u64,
        v.not_after.timestamp().max(0) as u64,
    ))
}

/// A connection's client certificate chain, checked against the client CA of the moment
/// when the last check may no longer hold.
pub(crate) struct PeerCert {
    chain: Vec<CertificateDer<'static>>,
    client_ca: Arc<Reloading<ClientCa>>,
    last: Mutex<Checked>,
}

/// The last check of a [`PeerCert`].
struct Checked {
    /// The client CA it was checked against.
    ca: Arc<ClientCa>,
    /// What it proved.
    cert: ClientCert,
    /// When (Unix seconds) the client CA was last looked at: again a second later at most,
    /// as the CA's file is.
    looked: u64,
    /// The Unix second after which the check may no longer hold (see [`check`]): for a valid
    /// chain the earliest `notAfter` of the chain and its CA; for one refused the second
    /// before the earliest `notBefore` still ahead, none if there is none (it stays refused
    /// until the CA changes).
    valid_until: Option<u64>,
}

impl std::fmt::Debug for PeerCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCert")
            .field("certificates", &self.chain.len())
            .finish()
    }
}

impl PeerCert {
    /// `chain` (end entity first), checked now against the client CA of `client_ca`.
    pub(crate) fn new(chain: Vec<CertificateDer<'static>>, client_ca: Arc<Reloading<ClientCa>>) -> Self {
        let now = UnixTime::now();
        let ca = client_ca.get();
        let (cert, valid_until) = check(&ca, &chain, now);
        PeerCert {
            chain,
            client_ca,
            last: Mutex::new(Checked {
                ca,
                cert,
                looked: now.as_secs(),
                valid_until,
            }),
        }
    }

    /// What the chain proves at `now`.
    fn at(&self, now: UnixTime) -> ClientCert {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let secs = now.as_secs();
        let mut stale = last.valid_until.is_some_and(|until| secs > until);
        if secs > last.looked {
            last.looked = secs;
            let ca = self.client_ca.get();
            if !Arc::ptr_eq(&ca, &last.ca) {
                last.ca = ca;
                stale = true;
            }
        }
        if stale {
            let (cert, valid_until) = check(&last.ca, &self.chain, now);
            if let ClientCert::Invalid(why) = &cert {
                tracing::info!(%why, "a connection's client certificate no longer verifies");
            }
            (last.cert, last.valid_until) = (cert, valid_until);
        }
        last.cert.clone()
    }
}

impl PeerCertificate for PeerCert {
    fn now(&self) -> ClientCert {
        self.at(UnixTime::now())
    }
}

/// What `chain` proves against `ca` at `now`, and the Unix second after which that may no
/// longer hold: for a valid chain the earliest `notAfter` of the chain and of the anchor it
/// verified against; for one refused, the second before the earliest `notBefore` still ahead
/// (of the chain or of a CA certificate: a certificate just issued, or a clock a little
/// behind, authenticates once it is valid), none if no date is ahead (refused until the CA
/// changes).
fn check(ca: &ClientCa, chain: &[CertificateDer<'_>], now: UnixTime) -> (ClientCert, Option<u64>) {
    let (cert, anchor_until) = ca.check_at(chain, now);
    let secs = now.as_secs();
    let until = match cert {
        // A certificate of the chain already past its `notAfter` is not on the path that
        // verified (a client may send extra ones): counting it would re-verify the chain at
        // every request.
        ClientCert::Valid(_) => Some(
            chain
                .iter()
                .filter_map(validity)
                .map(|(_, not_after)| not_after)
                .filter(|&not_after| not_after >= secs)
                .chain(anchor_until)
                .min()
                .unwrap_or(u64::MAX),
        ),
        _ => chain
            .iter()
            .filter_map(validity)
            .map(|(not_before, _)| not_before)
            .chain(ca.anchors.iter().map(|a| a.not_before))
            .filter(|&not_before| not_before > secs)
            .min()
            .map(|not_before| not_before - 1),
    };
    (cert, until)
}

/// The user a certificate names: its subject's CN, and each O as a group.
pub(crate) fn user(cert: &CertificateDer<'_>) -> Result<UserInfo, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| !cn.is_empty())
        .ok_or("the client certificate names no user (no subject CN)")?;
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_owned)
        .collect();
    Ok(UserInfo::authenticated(name, "", groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AUTHENTICATED, MASTERS};
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, date_time_ymd};

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn ca(name: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.der().clone(), Issuer::new(params, key))
    }

    fn client(
        issuer: &Issuer<'_, KeyPair>,
        cn: &str,
        orgs: &[&str],
        expired: bool,
    ) -> CertificateDer<'static> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        // rcgen keeps one attribute per type: a second O goes in under O's OID as a custom
        // type.
        for (i, o) in orgs.iter().enumerate() {
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    #[test]
    fn a_certificate_of_the_client_ca_names_its_cn_as_user_and_each_o_as_a_group() {
        let (root, issuer) = ca("client-ca");
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        let cert = client(&issuer, "jane", &[MASTERS, "dev"], false);
        let ClientCert::Valid(user) = ca.check(&[cert]) else {
            panic!("a valid certificate")
        };
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, [MASTERS, "dev", AUTHENTICATED]);
    }

    #[test]
    fn an_expired_certificate_is_invalid_and_says_why() {
        let (root, issuer) = ca("client-ca");
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        let cert = client(&issuer, "jane", &[], true);
        let ClientCert::Invalid(why) = ca.check(&[cert]) else {
            panic!("an expired certificate is invalid")
        };
        assert!(why.contains("xpired"), "{why}");
    }

    #[test]
    fn a_certificate_of_another_ca_is_invalid() {
        let (root, _) = ca("client-ca");
        let (_, other) = ca("other-ca");
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        let cert = client(&other, "mallory", &[MASTERS], false);
        assert!(matches!(ca.check(&[cert]), ClientCert::Invalid(_)));
        assert!(matches!(ca.check(&[]), ClientCert::None));
    }

    /// A client CA read from a file of `dir`, as `--client-ca-file` is: its issuer, and the
    /// CA reloading from the file.
    fn ca_file(dir: &std::path::Path, name: &str) -> (Issuer<'static, KeyPair>, Arc<Reloading<ClientCa>>) {
        let (root, issuer) = ca(name);
        let path = dir.join("client-ca.crt");
        write_pem(&path, &root);
        let p = path.clone();
        let reloading = Reloading::new(vec![path], move || ClientCa::from_pem_file(&p, &provider())).unwrap();
        (issuer, Arc::new(reloading))
    }

    fn write_pem(path: &std::path::Path, cert: &CertificateDer<'_>) {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            lines.join("\n")
        );
        std::fs::write(path, pem).unwrap();
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("watchcache-peer-cert-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_expired_extra_certificate_in_a_valid_chain_does_not_make_every_request_verify_it_again() {
        let dir = temp_dir("extra");
        let (issuer, client_ca) = ca_file(&dir, "client-ca");
        let (other, other_issuer) = ca("other");
        let chain = vec![
            client(&issuer, "jane", &[], false),
            // Not on the path that verifies: an old certificate the client sends along.
            client(&other_issuer, "old", &[], true),
            other,
        ];
        let now = UnixTime::now();
        let (cert, until) = check(&client_ca.get(), &chain, now);
        assert!(matches!(cert, ClientCert::Valid(_)));
        assert!(
            until.is_some_and(|until| until > now.as_secs()),
            "checked again only when a certificate of its path expires: {until:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_connections_certificate_stops_authenticating_once_it_has_expired() {
        let dir = temp_dir("expiry");
        let (issuer, client_ca) = ca_file(&dir, "client-ca");
        let now = UnixTime::now().as_secs();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "jane");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = date_time_ymd(2000, 1, 1);
        params.not_after = date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(now + 600);
        let cert = params.signed_by(&KeyPair::generate().unwrap(), &issuer).unwrap();
        let peer = PeerCert::new(vec![cert.der().clone()], client_ca);
        let at = |secs: u64| peer.at(UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs)));
        assert!(matches!(at(now), ClientCert::Valid(_)));
        assert!(
            matches!(at(now + 600), ClientCert::Valid(_)),
            "valid to its notAfter"
        );
        let ClientCert::Invalid(why) = at(now + 601) else {
            panic!("expired past its notAfter")
        };
        assert!(why.contains("xpired"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_connections_certificate_stops_authenticating_when_the_client_ca_no_longer_verifies_it() {
        let dir = temp_dir("reload");
        let (issuer, client_ca) = ca_file(&dir, "client-ca");
        let cert = client(&issuer, "jane", &[], false);
        let peer = PeerCert::new(vec![cert], Arc::clone(&client_ca));
        assert!(matches!(peer.now(), ClientCert::Valid(_)));
        // The client CA file is replaced by another CA's.
        std::thread::sleep(super::super::reload::CHECK_EVERY);
        let (other, _) = ca("other-ca");
        write_pem(&dir.join("client-ca.crt"), &other);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert!(matches!(peer.now(), ClientCert::Invalid(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_certificate_without_a_cn_names_no_user() {
        let (root, issuer) = ca("client-ca");
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        let cert = client(&issuer, "", &["dev"], false);
        assert!(matches!(ca.check(&[cert]), ClientCert::Invalid(_)));
    }

    /// A CA certificate with the given validity (Unix seconds), as a client CA.
    fn dated_ca(not_before: u64, not_after: u64) -> (ClientCa, Issuer<'static, KeyPair>) {
        let epoch = date_time_ymd(1970, 1, 1);
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "dated-ca");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = epoch + std::time::Duration::from_secs(not_before);
        params.not_after = epoch + std::time::Duration::from_secs(not_after);
        let key = KeyPair::generate().unwrap();
        let root = params.self_signed(&key).unwrap().der().clone();
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        (ca, Issuer::new(params, key))
    }

    fn secs(s: u64) -> UnixTime {
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(s))
    }

    /// A client CA certificate that has expired authenticates no one (webpki does not look
    /// at an anchor's dates; Go's x509, the apiserver's, refuses such a chain), and one that
    /// expires while a connection is open stops authenticating it: its `notAfter` is one of
    /// the connection's re-check times.
    #[test]
    fn an_expired_client_ca_authenticates_no_one() {
        let (old, issuer) = dated_ca(946_684_800, 978_307_200);
        let cert = client(&issuer, "jane", &[], false);
        let ClientCert::Invalid(why) = old.check(&[cert]) else {
            panic!("a certificate of a CA expired in 2001 authenticates")
        };
        assert!(why.contains("CA certificate has expired"), "{why}");

        let now = UnixTime::now().as_secs();
        let (ca, issuer) = dated_ca(now - 3600, now + 60);
        let cert = client(&issuer, "jane", &[], false);
        let (proved, until) = check(&ca, std::slice::from_ref(&cert), secs(now));
        assert!(matches!(proved, ClientCert::Valid(_)), "{proved:?}");
        assert_eq!(until, Some(now + 60), "the CA's notAfter bounds the proof");
        assert!(matches!(
            check(&ca, &[cert], secs(now + 61)).0,
            ClientCert::Invalid(_)
        ));
    }

    /// A certificate not valid yet at the handshake (just issued, a clock a little behind)
    /// authenticates its connection once its `notBefore` has come, as a new connection would.
    #[test]
    fn a_certificate_not_yet_valid_at_the_handshake_authenticates_once_it_is() {
        let dir = temp_dir("not-before");
        let (issuer, client_ca) = ca_file(&dir, "client-ca");
        let now = UnixTime::now().as_secs();
        let epoch = date_time_ymd(1970, 1, 1);
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "jane");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = epoch + std::time::Duration::from_secs(now + 60);
        params.not_after = epoch + std::time::Duration::from_secs(now + 86_400);
        let cert = params.signed_by(&KeyPair::generate().unwrap(), &issuer).unwrap();
        let peer = PeerCert::new(vec![cert.der().clone()], client_ca);
        let first = peer.at(secs(now));
        let early = peer.at(secs(now + 59));
        let later = peer.at(secs(now + 60));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            matches!(first, ClientCert::Invalid(_)),
            "not valid yet: {first:?}"
        );
        assert!(
            matches!(early, ClientCert::Invalid(_)),
            "not valid yet: {early:?}"
        );
        assert!(
            matches!(later, ClientCert::Valid(_)),
            "valid from its notBefore: {later:?}"
        );
    }
}
