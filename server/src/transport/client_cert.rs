//! Client certificates: the handshake accepts any certificate whose key the client proves it
//! holds ([`ProvenKey`]); once the handshake ends, the chain is verified against the client
//! CA of that moment ([`ClientCa::check`]) and read into a user: the subject's CN is the
//! name, each O a group, as kube-apiserver's x509 authenticator reads it. A certificate that
//! does not verify is [`ClientCert::Invalid`], which authentication answers with a 401 rather
//! than the handshake with an alert.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::auth::{ClientCert, UserInfo};

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

/// The client CA: what client certificates must chain to.
#[derive(Debug)]
pub(crate) struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
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
        let mut store = RootCertStore::empty();
        for root in roots {
            store
                .add(root)
                .map_err(|e| format!("not a CA certificate: {e}"))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(store), Arc::clone(provider))
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("cannot verify client certificates: {e}"))?;
        Ok(ClientCa { verifier })
    }

    /// What a presented chain (end entity first) proves, now.
    pub(crate) fn check(&self, chain: &[CertificateDer<'_>]) -> ClientCert {
        self.check_at(chain, UnixTime::now())
    }

    fn check_at(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> ClientCert {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return ClientCert::None;
        };
        if let Err(e) = self.verifier.verify_client_cert(end_entity, intermediates, now) {
            return ClientCert::Invalid(format!("the client certificate does not verify: {e}").into());
        }
        match user(end_entity) {
            Ok(user) => ClientCert::Valid(Arc::new(user)),
            Err(e) => ClientCert::Invalid(e.into()),
        }
    }
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

    #[test]
    fn a_certificate_without_a_cn_names_no_user() {
        let (root, issuer) = ca("client-ca");
        let ca = ClientCa::from_roots(vec![root], &provider()).unwrap();
        let cert = client(&issuer, "", &["dev"], false);
        assert!(matches!(ca.check(&[cert]), ClientCert::Invalid(_)));
    }
}
