//! `--cert-dir`: what a server needs to serve TLS to kubectl out of the box, made once and
//! reused on every start after: a CA (`ca.crt`, `ca.key`), a serving certificate signed by it
//! (`apiserver.crt`, `apiserver.key`: localhost, 127.0.0.1, ::1 and the bind address), and an
//! admin client certificate (`admin.crt`, `admin.key`: CN `watchcache-admin`, O
//! `system:masters`), and `admin.kubeconfig`, written at each start with the address served.
//! The CA is also the client CA, unless `--client-ca-file` names another.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::auth::MASTERS;

/// The admin certificate's user.
pub(crate) const ADMIN: &str = "watchcache-admin";

/// The files of a certificate directory.
#[derive(Clone, Debug)]
pub(crate) struct CertDir {
    dir: PathBuf,
}

const FILES: [&str; 6] = [
    "ca.crt",
    "ca.key",
    "apiserver.crt",
    "apiserver.key",
    "admin.crt",
    "admin.key",
];

impl CertDir {
    /// The directory's certificates: those there already, or new ones (all of them, when any
    /// is missing) for a server bound to `bind`.
    pub(crate) fn ensure(dir: &Path, bind: IpAddr) -> Result<CertDir, String> {
        let certs = CertDir { dir: dir.to_owned() };
        if FILES.iter().all(|f| certs.path(f).exists()) {
            return Ok(certs);
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        certs
            .generate(bind)
            .map_err(|e| format!("cannot make certificates in {}: {e}", dir.display()))?;
        tracing::info!(dir = %dir.display(), "made a CA, a serving certificate and an admin certificate");
        Ok(certs)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The serving certificate.
    pub(crate) fn cert(&self) -> PathBuf {
        self.path("apiserver.crt")
    }

    /// The serving certificate's key.
    pub(crate) fn key(&self) -> PathBuf {
        self.path("apiserver.key")
    }

    /// The CA.
    pub(crate) fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// The kubeconfig of the admin certificate.
    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.path("admin.kubeconfig")
    }

    fn generate(&self, bind: IpAddr) -> Result<(), Box<dyn std::error::Error>> {
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "watchcache-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_after = rcgen::date_time_ymd(2125, 1, 1);
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca, ca_key);

        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
        if !bind.is_unspecified() && !bind.is_loopback() {
            names.push(bind.to_string());
        }
        let mut serving = CertificateParams::new(names)?;
        serving.distinguished_name.push(DnType::CommonName, "watchcache");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.not_after = rcgen::date_time_ymd(2125, 1, 1);
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;

        let mut admin = CertificateParams::default();
        admin.distinguished_name.push(DnType::CommonName, ADMIN);
        admin.distinguished_name.push(DnType::OrganizationName, MASTERS);
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.not_after = rcgen::date_time_ymd(2125, 1, 1);
        let admin_key = KeyPair::generate()?;
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;

        // Keys first, then certificates: a directory whose certificates are all present is
        // whole.
        write(&self.path("ca.key"), &ca_key_pem, true)?;
        write(&self.path("apiserver.key"), &serving_key.serialize_pem(), true)?;
        write(&self.path("admin.key"), &admin_key.serialize_pem(), true)?;
        write(&self.path("apiserver.crt"), &serving_cert.pem(), false)?;
        write(&self.path("admin.crt"), &admin_cert.pem(), false)?;
        write(&self.path("ca.crt"), &ca_cert.pem(), false)?;
        Ok(())
    }

    /// Writes `admin.kubeconfig` for a server at `addr`: its address (127.0.0.1 for an
    /// unspecified one), the CA and the admin certificate and key, embedded.
    pub(crate) fn write_kubeconfig(&self, addr: SocketAddr) -> Result<(), String> {
        let host = if addr.ip().is_unspecified() {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        } else {
            addr
        };
        let read = |f: &str| {
            std::fs::read(self.path(f))
                .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
                .map_err(|e| format!("{}: {e}", self.path(f).display()))
        };
        let config = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: watchcache\n  cluster:\n    server: https://{host}\n    certificate-authority-data: {ca}\n\
             users:\n\
             - name: {ADMIN}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n\
             contexts:\n\
             - name: watchcache\n  context:\n    cluster: watchcache\n    user: {ADMIN}\n\
             current-context: watchcache\n",
            ca = read("ca.crt")?,
            cert = read("admin.crt")?,
            key = read("admin.key")?,
        );
        write(&self.kubeconfig(), &config, true).map_err(|e| format!("{}: {e}", self.kubeconfig().display()))
    }
}

/// Writes a file whole (a temporary file renamed into place), readable by its owner only if
/// `secret`. The temporary file is made new here, with its mode from the start: one left by
/// an earlier run (with another mode, or a link planted to somewhere else) is removed first,
/// never written through, so a key is never readable by others, not even while it is written.
fn write(path: &Path, contents: &str, secret: bool) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(tmp, path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_written_through_a_new_owner_only_file_even_over_a_leftover_one() {
        let dir = std::env::temp_dir().join(format!("watchcache-cert-dir-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("ca.key");
        // A temporary file an interrupted run left, readable by everyone.
        std::fs::write(key.with_extension("tmp"), "old").unwrap();
        std::fs::set_permissions(key.with_extension("tmp"), std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&key, "secret", true).unwrap();
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "secret");
        assert!(!key.with_extension("tmp").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
