//! Link identities and mutual TLS by pinned certificates. Every broker and core has a key pair
//! and a self-signed certificate; each side accepts the other only if the certificate's SHA-256
//! is one it was given. The chain check is replaced by the pin; the handshake's signatures are
//! still verified with the peer's key, so only the holder of the pinned key gets through.
//! TLS 1.3 only, rustls with the ring provider.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{self, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio_rustls::rustls;

/// The file stem of a link peer's identity in its directory (`link.crt`, `link.key`).
pub const LINK_STEM: &str = "link";

/// The TLS application protocol both ends of a link require.
pub const ALPN: &[u8] = b"strata-link/1";

/// The name a link's client asks for (the pin, not the name, decides).
pub const LINK_SERVER_NAME: &str = "strata-link";

/// A key pair and its self-signed certificate, as PEM text.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Makes a new identity whose certificate names `id`.
pub fn generate(id: &str) -> Result<Identity, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("making a key pair: {e}"))?;
    let mut params = rcgen::CertificateParams::new(vec![LINK_SERVER_NAME.to_owned()])
        .map_err(|e| format!("certificate parameters: {e}"))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, id);
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("signing the certificate: {e}"))?;
    Ok(Identity {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Reads `<stem>.crt` and `<stem>.key` in `dir`, making them (key readable by the owner only)
/// when neither exists.
pub fn load_or_generate(dir: &Path, stem: &str, id: &str) -> Result<Identity, String> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    if !cert.exists() && !key.exists() {
        let made = generate(id)?;
        save(dir, stem, &made)?;
        return Ok(made);
    }
    load(dir, stem)
}

/// Writes an identity as `<stem>.crt` and `<stem>.key` (mode 0600).
pub fn save(dir: &Path, stem: &str, identity: &Identity) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join(format!("{stem}.key"));
    crate::state::write_atomic(&key, identity.key_pem.as_bytes())
        .and_then(|()| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)))
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let cert = dir.join(format!("{stem}.crt"));
    crate::state::write_atomic(&cert, identity.cert_pem.as_bytes())
        .map_err(|e| format!("{}: {e}", cert.display()))
}

pub fn load(dir: &Path, stem: &str) -> Result<Identity, String> {
    let read = |ext: &str| {
        let p = dir.join(format!("{stem}.{ext}"));
        std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    Ok(Identity {
        cert_pem: read("crt")?,
        key_pem: read("key")?,
    })
}

impl Identity {
    fn cert_der(&self) -> Result<CertificateDer<'static>, String> {
        rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .next()
            .ok_or("no certificate in the PEM text")?
            .map_err(|e| format!("reading the certificate: {e}"))
    }

    fn key_der(&self) -> Result<PrivateKeyDer<'static>, String> {
        rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .map_err(|e| format!("reading the key: {e}"))?
            .ok_or_else(|| "no private key in the PEM text".to_owned())
    }

    /// SHA-256 of the certificate, in lowercase hex: what the other side pins.
    pub fn fingerprint(&self) -> Result<String, String> {
        Ok(fingerprint(&self.cert_der()?))
    }
}

/// SHA-256 of a DER certificate in lowercase hex.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A pin check: whether a certificate fingerprint is accepted.
pub type Pins = Arc<dyn Fn(&str) -> bool + Send + Sync>;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(crypto::ring::default_provider())
}

/// Verifies a peer certificate by its pin, and the handshake signature by its key.
struct PinVerifier {
    pins: Pins,
    algorithms: WebPkiSupportedAlgorithms,
}

impl std::fmt::Debug for PinVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PinVerifier")
    }
}

impl PinVerifier {
    fn new(pins: Pins) -> PinVerifier {
        PinVerifier {
            pins,
            algorithms: provider().signature_verification_algorithms,
        }
    }

    fn check(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if (self.pins)(&fingerprint(end_entity)) {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ClientCertVerifier for PinVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The TLS client side of a link (whoever dialled), presenting `identity`.
pub fn client_config(identity: &Identity, pins: Pins) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinVerifier::new(pins)))
        .with_client_auth_cert(vec![identity.cert_der()?], identity.key_der()?)
        .map_err(|e| format!("TLS client identity: {e}"))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The TLS server side of a link (whoever was dialled), requiring a pinned client certificate.
pub fn server_config(identity: &Identity, pins: Pins) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS: {e}"))?
        .with_client_cert_verifier(Arc::new(PinVerifier::new(pins)))
        .with_single_cert(vec![identity.cert_der()?], identity.key_der()?)
        .map_err(|e| format!("TLS server identity: {e}"))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The pinned fingerprint of the peer of an established connection.
pub fn peer_fingerprint(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    certs.and_then(|c| c.first()).map(|c| fingerprint(c))
}

pub fn server_name() -> Result<ServerName<'static>, String> {
    ServerName::try_from(LINK_SERVER_NAME).map_err(|e| format!("TLS server name: {e}"))
}

/// A pin set of one fingerprint (lowercase hex; `:` separators and case are ignored).
pub fn pin_one(fp: &str) -> Pins {
    let want = normalize(fp);
    Arc::new(move |got: &str| got == want)
}

/// A fingerprint as written by people: `AB:CD:…` or `abcd…`.
pub fn normalize(fp: &str) -> String {
    fp.chars()
        .filter(|c| *c != ':')
        .flat_map(char::to_lowercase)
        .collect()
}
