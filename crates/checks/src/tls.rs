//! TLS for https, tcp and nrpe: client configurations (verification on or off, a CA file, a
//! client certificate), cached per process because building one (parsing Mozilla's roots) costs
//! far more than a handshake; the certificate's days to expiry; failures as sentences.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    self, AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};
use tokio_rustls::TlsConnector;

use crate::error::CheckError;

/// Client configurations kept; past it the cache starts over (specs change rarely).
const CONFIGS_CACHED_MAX: usize = 256;
/// Largest PEM file read (CA bundles are a few hundred KB).
const PEM_FILE_BYTES_MAX: u64 = 4 << 20;

/// The TLS options a spec's `config` may give (the same names for every kind).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq, Hash)]
pub(crate) struct Options {
    /// Verify the server's certificate chain and name (default true).
    pub tls_verify: Option<bool>,
    /// PEM file of CA certificates to trust instead of Mozilla's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain and key (NRPE with `ssl_client_certs`).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Name to verify and send as SNI instead of the target's host.
    pub server_name: Option<String>,
}

impl Options {
    pub(crate) fn check(&self) -> Result<(), CheckError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(CheckError::field(
                "config.cert_file",
                "cert_file and key_file go together",
            ));
        }
        if let Some(name) = &self.server_name {
            ServerName::try_from(name.as_str()).map_err(|_| {
                CheckError::field("config.server_name", "not a valid DNS name or IP address")
            })?;
        }
        Ok(())
    }

    /// The name to verify: `server_name` if given, else the target's host.
    pub(crate) fn name_for(&self, host: &str) -> Result<ServerName<'static>, CheckError> {
        let name = self.server_name.as_deref().unwrap_or(host);
        ServerName::try_from(name.to_owned())
            .map_err(|_| CheckError::field("target", "the host is not a valid TLS server name"))
    }
}

/// A TLS session over `tcp`, with its handshake time and the peer's leaf certificate.
pub(crate) struct Session {
    pub stream: TlsStream<TcpStream>,
    pub handshake: Duration,
}

/// Runs the handshake; `Err` is the failure as a sentence (the service is measured as down).
pub(crate) async fn handshake(
    connector: &TlsConnector,
    name: ServerName<'static>,
    tcp: TcpStream,
) -> Result<Session, String> {
    let started = tokio::time::Instant::now();
    match connector.connect(name, tcp).await {
        Ok(stream) => Ok(Session {
            stream,
            handshake: started.elapsed(),
        }),
        Err(e) => Err(format!("TLS handshake failed: {}", io_reason(&e))),
    }
}

/// Days until the peer's leaf certificate expires (negative once it has), if it sent one that
/// parses.
pub(crate) fn expiry_days(session: &Session) -> Option<f64> {
    let (_, conn) = session.stream.get_ref();
    let leaf = conn.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let not_after = cert.validity().not_after.timestamp() as f64;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some((not_after - now) / 86_400.0)
}

/// A connector for these options and ALPN protocols, from the cache when it was built before.
pub(crate) fn connector(o: &Options, alpn: &[&[u8]]) -> Result<TlsConnector, CheckError> {
    let key = cache_key(o, alpn);
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<ClientConfig>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(config) = lock(cache).get(&key) {
        return Ok(TlsConnector::from(Arc::clone(config)));
    }
    let config = Arc::new(build(o, alpn)?);
    let mut map = lock(cache);
    if map.len() >= CONFIGS_CACHED_MAX {
        map.clear();
    }
    map.insert(key, Arc::clone(&config));
    Ok(TlsConnector::from(config))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the map half-written.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The options, the ALPN list and each file's modification time: a replaced CA file makes a
/// new configuration.
fn cache_key(o: &Options, alpn: &[&[u8]]) -> String {
    let stamp = |p: &Option<PathBuf>| {
        p.as_ref().map(|p| {
            let modified = std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let nanos = modified
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}@{nanos}", p.display())
        })
    };
    format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}",
        o.tls_verify,
        stamp(&o.ca_file),
        stamp(&o.cert_file),
        stamp(&o.key_file),
        alpn
    )
}

fn build(o: &Options, alpn: &[&[u8]]) -> Result<ClientConfig, CheckError> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| CheckError::setup(format!("TLS setup failed: {}", rustls_reason(&e))))?;
    let builder = if o.tls_verify.unwrap_or(true) {
        builder.with_root_certificates(roots(o.ca_file.as_deref())?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    };
    let mut config = match (&o.cert_file, &o.key_file) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs("config.cert_file", cert)?, read_key(key)?)
            .map_err(|e| {
                CheckError::field(
                    "config.key_file",
                    format!("unusable: {}", rustls_reason(&e)),
                )
            })?,
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, CheckError> {
    let mut store = RootCertStore::empty();
    match ca_file {
        None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            for cert in read_certs("config.ca_file", path)? {
                store.add(cert).map_err(|e| {
                    CheckError::field(
                        "config.ca_file",
                        format!("{}: {}", path.display(), rustls_reason(&e)),
                    )
                })?;
            }
        }
    }
    Ok(store)
}

fn read_pem(field: &str, path: &Path) -> Result<Vec<u8>, CheckError> {
    let unreadable =
        |why: String| CheckError::setup(format!("{field}: cannot read {}: {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?;
    if meta.len() > PEM_FILE_BYTES_MAX {
        return Err(unreadable(format!(
            "larger than {PEM_FILE_BYTES_MAX} bytes"
        )));
    }
    std::fs::read(path).map_err(|e| unreadable(e.to_string()))
}

fn read_certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, CheckError> {
    let pem = read_pem(field, path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| CheckError::setup(format!("{field}: {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(CheckError::setup(format!(
            "{field}: {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, CheckError> {
    let pem = read_pem("config.key_file", path)?;
    rustls_pemfile::private_key(&mut pem.as_slice())
        .map_err(|e| CheckError::setup(format!("config.key_file: {}: {e}", path.display())))?
        .ok_or_else(|| {
            CheckError::setup(format!(
                "config.key_file: {} holds no PEM private key",
                path.display()
            ))
        })
}

/// Accepts any certificate (`tls_verify: false`) but still checks the handshake's signatures,
/// so the session is at least bound to the key the server presented.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// An I/O error from a TLS stream as a sentence: the rustls error inside it when there is one.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => rustls_reason(tls),
        None => crate::error::io_reason(e),
    }
}

/// rustls errors in words (its own Display prints enum names for alerts and causes).
pub(crate) fn rustls_reason(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(c) => certificate_reason(c).to_owned(),
        rustls::Error::AlertReceived(a) => alert_reason(*a).to_owned(),
        rustls::Error::NoCertificatesPresented => "the server sent no certificate".to_owned(),
        rustls::Error::PeerIncompatible(_) => {
            "the server has no TLS version, cipher suite or key exchange in common with us"
                .to_owned()
        }
        rustls::Error::PeerMisbehaved(_)
        | rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => {
            "the server broke the TLS protocol (is it speaking TLS on this port?)".to_owned()
        }
        rustls::Error::DecryptError => "cannot decrypt the server's message".to_owned(),
        rustls::Error::General(text) => text.clone(),
        _ => "TLS error".to_owned(),
    }
}

fn certificate_reason(e: &CertificateError) -> &'static str {
    match e {
        CertificateError::UnknownIssuer => "certificate signed by an unknown authority",
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "certificate expired"
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "certificate not valid yet"
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "certificate not valid for this host name"
        }
        CertificateError::BadSignature => "certificate has a bad signature",
        CertificateError::BadEncoding => "certificate cannot be decoded",
        CertificateError::Revoked => "certificate revoked",
        _ => "certificate not accepted",
    }
}

fn alert_reason(a: AlertDescription) -> &'static str {
    match a {
        AlertDescription::HandshakeFailure | AlertDescription::InsufficientSecurity => {
            "the server refused the handshake: no cipher suite in common"
        }
        AlertDescription::ProtocolVersion => {
            "the server refused the handshake: no TLS version in common"
        }
        AlertDescription::CertificateRequired | AlertDescription::BadCertificate => {
            "the server wants a client certificate it accepts"
        }
        AlertDescription::UnknownCA => "the server does not trust our client certificate's CA",
        AlertDescription::CertificateExpired => "the server says our client certificate expired",
        AlertDescription::AccessDenied => "the server denied access",
        _ => "the server ended the handshake with a fatal alert",
    }
}
