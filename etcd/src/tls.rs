//! TLS to the members: the CA that signs their serving certificates and the client
//! certificate this source presents, read from PEM files as the apiserver's `--etcd-cafile`,
//! `--etcd-certfile` and `--etcd-keyfile` give them, and the rule that decides, per endpoint,
//! whether a connection is made over TLS (rustls on the `ring` provider, through tonic).

use std::path::Path;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// What this source needs to reach members over TLS. Endpoints must then be `https://`.
#[derive(Clone, Default)]
pub struct EtcdTls {
    /// PEM certificates of the CA (or CAs) that sign the members' serving certificates. None:
    /// no member can be verified, so an `https://` endpoint is refused at once.
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its private key, both PEM, for members that require
    /// one (`--client-cert-auth`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("EtcdTls")
            .field("ca", &self.ca.as_ref().map(|c| c.len()))
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

impl EtcdTls {
    /// Reads the files, each named in its error: a certificate needs its key and a key its
    /// certificate; each file must hold at least one PEM block.
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<Self, String> {
        let read = |what: &str, path: &Path, label: &str| -> Result<Vec<u8>, String> {
            let bytes = std::fs::read(path)
                .map_err(|e| format!("cannot read the etcd {what} {}: {e}", path.display()))?;
            let text = String::from_utf8_lossy(&bytes);
            if !text.contains("-----BEGIN ") || (!label.is_empty() && !text.contains(label)) {
                return Err(format!(
                    "the etcd {what} {} holds no PEM {}",
                    path.display(),
                    if label.is_empty() {
                        "block"
                    } else {
                        label.trim_start_matches("-----BEGIN ")
                    }
                ));
            }
            Ok(bytes)
        };
        let ca = ca
            .map(|p| read("CA file", p, "-----BEGIN CERTIFICATE"))
            .transpose()?;
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((
                read("certificate file", c, "-----BEGIN CERTIFICATE")?,
                read("key file", k, "")?,
            )),
            (None, None) => None,
            (Some(_), None) => return Err("an etcd client certificate needs its key (--etcd-keyfile)".into()),
            (None, Some(_)) => {
                return Err("an etcd client key needs its certificate (--etcd-certfile)".into());
            }
        };
        Ok(EtcdTls { ca, identity })
    }

    fn options(&self) -> TlsOptions {
        let mut options = TlsOptions::new();
        if let Some(ca) = &self.ca {
            options = options.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            options = options.identity(Identity::from_pem(cert, key));
        }
        options
    }
}

/// `options` for `endpoint`: over TLS when it is `https://`. An `https://` endpoint without a
/// CA, or TLS files with an `http://` endpoint, is a configuration error, said before anything
/// is dialled (rather than a handshake failure, or files silently unused).
pub(crate) fn for_endpoint(
    endpoint: &str,
    tls: Option<&EtcdTls>,
    options: ConnectOptions,
) -> Result<ConnectOptions, String> {
    let https = endpoint.starts_with("https://");
    match tls {
        Some(tls) if https && tls.ca.is_some() => Ok(options.with_tls(tls.options())),
        _ if https => Err(format!(
            "{endpoint}: an https:// endpoint needs the CA that signs etcd's serving certificate (--etcd-cafile)"
        )),
        Some(_) => Err(format!(
            "{endpoint}: TLS files are given for etcd, but this endpoint is not https://"
        )),
        None => Ok(options),
    }
}

/// What to add to a failure on `endpoint` that TLS may explain. A member that requires a
/// client certificate and does not trust the one given (or got none) refuses it after the
/// TLS 1.3 handshake has ended on the client's side, by closing the connection: the client
/// sees a broken pipe, a reset or a cancelled request, with no word of certificates. So a
/// request on an `https://` endpoint that failed in the transport once the connection was
/// made (not refused, not a handshake error, which names its certificate) gets the hint.
pub(crate) fn hint(endpoint: &str, e: &etcd_client::Error) -> &'static str {
    let causes = crate::members::causes(e);
    let local = causes.len() > 1;
    let named = causes.iter().any(|c| c.to_string().contains("certificate"));
    if endpoint.starts_with("https://") && local && !named && !crate::members::never_sent(e) {
        " (the connection was closed once TLS was set up: etcd may require a client \
         certificate it trusts; check --etcd-certfile and --etcd-keyfile, and that their CA is \
         etcd's --trusted-ca-file)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_needs_a_ca_and_tls_files_need_https() {
        let ca = EtcdTls {
            ca: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            identity: None,
        };
        let plain = ConnectOptions::new;
        assert!(for_endpoint("https://127.0.0.1:2379", Some(&ca), plain()).is_ok());
        assert!(for_endpoint("http://127.0.0.1:2379", None, plain()).is_ok());
        let no_ca = for_endpoint("https://127.0.0.1:2379", None, plain()).unwrap_err();
        assert!(no_ca.contains("--etcd-cafile"), "{no_ca}");
        let only_identity = EtcdTls {
            ca: None,
            identity: Some((vec![], vec![])),
        };
        assert!(for_endpoint("https://127.0.0.1:2379", Some(&only_identity), plain()).is_err());
        let unused = for_endpoint("http://127.0.0.1:2379", Some(&ca), plain()).unwrap_err();
        assert!(unused.contains("not https://"), "{unused}");
    }

    #[test]
    fn files_are_named_in_their_errors() {
        let dir = std::env::temp_dir().join(format!("watchcache-etcd-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.txt");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = EtcdTls::from_files(Some(&not_pem), None, None).unwrap_err();
        assert!(e.contains("ca.txt") && e.contains("no PEM"), "{e}");
        let missing = dir.join("missing.pem");
        let e = EtcdTls::from_files(Some(&missing), None, None).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
        let e = EtcdTls::from_files(None, Some(&missing), None).unwrap_err();
        assert!(e.contains("--etcd-keyfile"), "{e}");
        assert!(EtcdTls::from_files(None, None, None).is_ok_and(|t| t.ca.is_none() && t.identity.is_none()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
