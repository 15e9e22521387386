//! TLS 1.3 for both transports: identities, trust, mutual authentication, and typed
//! certificate errors (cargo feature `tls`; `quic` brings it).
//!
//! # When to turn it on
//!
//! **Plaintext TCP stays the default**, for trusted networks: a storage cluster's back end,
//! behind its own isolation, where every byte of CPU goes to moving data. TLS costs CPU per
//! byte on both ends: 1.3-2.4x plaintext's CPU per GiB on this project's 2-core VM, measured
//! with `incast-bench sweep --loopback --strategies default,tls`. Turn TLS on where the path
//! or the peers are not trusted:
//!
//! - **TCP:** [`ServerConfigBuilder::tls`](crate::ServerConfigBuilder::tls) with a
//!   [`TlsServerConfig`], [`ClientConfigBuilder::tls`](crate::ClientConfigBuilder::tls) with a
//!   [`TlsClientConfig`]. A server with TLS speaks nothing else on that port.
//! - **QUIC** always encrypts; there is no plaintext mode and nothing here turns verification
//!   off. [`QuicServerConfigBuilder::client_certs`](crate::quic::QuicServerConfigBuilder::client_certs)
//!   and [`QuicClientConfigBuilder::identity`](crate::quic::QuicClientConfigBuilder::identity)
//!   make it mutual.
//!
//! # Who may read: mutual TLS
//!
//! A server given client trust ([`TlsServerConfigBuilder::client_certs`]) requires every client
//! to present a certificate that chains to it and refuses the others in the handshake. TLS 1.3
//! ends the client's side of the handshake before the server has judged its certificate, so the
//! client learns of a refusal from the server's alert: the read then fails with
//! [`TlsFailure::Refused`] (over QUIC,
//! [`QuicError::Refused`](crate::quic::QuicError::Refused)), naming a [`ClientCertRefusal`],
//! not with a generic connection error. Refusals and refused server certificates end the read
//! at once: they do not heal by retrying.
//!
//! # Setting it up
//!
//! - **Tests and demos:** [`SelfSigned::generate`] makes a certificate and key at start (rcgen);
//!   the server uses [`SelfSigned::identity`], the client trusts exactly that certificate with
//!   [`SelfSigned::trust`]. A second `SelfSigned` gives the client its identity, and its
//!   `trust()` is what the server trusts.
//! - **Production:** each side loads its chain and key with [`TlsIdentity::from_pem_files`],
//!   and trusts the issuing CA with [`TlsTrust::from_pem_file`].
//!
//! The client checks the server's certificate with rustls's WebPKI verifier (chain, validity
//! period, name); the server checks a client's the same way (chain and validity period). When
//! the client refuses one, the read fails with a [`CertProblem`] (expired, wrong name, unknown
//! issuer, ...), not a generic handshake failure: the verifier is wrapped only to remember why
//! it refused.
//!
//! # Example
//!
//! Run the tests that do this end to end:
//! `cargo test --release -p incast-rpc --features tls --test tls`
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use incast_core::{Policy, ServerId, Stripe};
//! use incast_rpc::tls::{SelfSigned, TlsClientConfig, TlsServerConfig};
//! use incast_rpc::{serve, Client, ClientConfig, MemStore, ServerConfig};
//!
//! let (server_cert, client_cert) = (SelfSigned::generate(["127.0.0.1"])?, SelfSigned::generate(["reader"])?);
//! let store = MemStore::new();
//! store.insert("blk", vec![7u8; 1 << 20]);
//! let tls = TlsServerConfig::builder(server_cert.identity()).client_certs(client_cert.trust()?).build()?;
//! let server = serve("127.0.0.1:0".parse()?, store, ServerConfig::builder().tls(tls).build()?).await?;
//!
//! let tls = TlsClientConfig::builder(server_cert.trust()?).identity(client_cert.identity()).build()?;
//! let client = Client::with_config(
//!     [(ServerId(0), server.local_addr())],
//!     ClientConfig::builder().tls(tls).build()?,
//! );
//! let stripe = Stripe::fixed_block("blk", &[ServerId(0)], 1 << 20)?;
//! let out = client.fan_in_read(&stripe, &Policy::default()).await?;
//! assert_eq!(out.block.len(), 1 << 20);
//! # Ok(()) }
//! ```

mod tcp;

pub(crate) use tcp::{accept as accept_tcp, connect as connect_tcp, failure_of as failure_of_io};
pub(crate) use tcp::{Session, TlsWriter};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use std::net::SocketAddr;

use incast_core::ServerId;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The ALPN protocol both sides insist on, over TCP and QUIC: an endpoint of something else is
/// refused in the handshake instead of being sent fragment requests.
pub const ALPN: &[u8] = b"incast/1";

/// Why a certificate, key or trust store could not be loaded or built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("reading {what} from `{}`: {detail}", path.display())]
    ReadPem {
        /// The file.
        path: PathBuf,
        /// What was being read ("certificate chain", "private key", "CA certificates").
        what: &'static str,
        /// The reader's message.
        detail: String,
    },
    /// A PEM file holds no item of the kind wanted.
    #[error("`{}` holds no {what}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
    /// A certificate could not be added to the trust store (not a parseable X.509 CA).
    #[error("cannot trust this certificate: {0}")]
    BadTrustAnchor(String),
    /// rustls refused the identity (e.g. the key does not match the certificate, or its type is
    /// unsupported).
    #[error("tls configuration refused: {0}")]
    Config(String),
    /// rcgen could not generate a certificate (e.g. a name that is not a DNS name or address).
    #[error("generating a self-signed certificate: {0}")]
    Generate(String),
}

/// Why the client refused a server's certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CertProblem {
    /// The certificate's validity period has ended.
    Expired,
    /// The certificate's validity period has not begun.
    NotYetValid,
    /// The certificate is not valid for the name (or address) the client connected to.
    WrongName,
    /// The chain does not lead to a trusted CA (or, for a self-signed certificate, it is not the
    /// one trusted).
    UnknownIssuer,
    /// The certificate was revoked.
    Revoked,
    /// A signature in the chain is invalid.
    BadSignature,
    /// Anything else rustls reports, in its words.
    Other(String),
}

impl fmt::Display for CertProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertProblem::Expired => f.write_str("certificate expired"),
            CertProblem::NotYetValid => f.write_str("certificate not valid yet"),
            CertProblem::WrongName => f.write_str("certificate not valid for this server name"),
            CertProblem::UnknownIssuer => f.write_str("certificate issuer is not trusted"),
            CertProblem::Revoked => f.write_str("certificate revoked"),
            CertProblem::BadSignature => f.write_str("bad signature in the certificate chain"),
            CertProblem::Other(s) => write!(f, "certificate refused: {s}"),
        }
    }
}

impl CertProblem {
    fn of(e: &rustls::Error) -> Self {
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => CertProblem::Expired,
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => CertProblem::NotYetValid,
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    CertProblem::WrongName
                }
                CertificateError::UnknownIssuer => CertProblem::UnknownIssuer,
                CertificateError::Revoked => CertProblem::Revoked,
                CertificateError::BadSignature => CertProblem::BadSignature,
                other => CertProblem::Other(format!("{other:?}")),
            },
            other => CertProblem::Other(other.to_string()),
        }
    }
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why a server refused this client in the TLS handshake, from the alert it sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientCertRefusal {
    /// The server requires a client certificate and this client presented none (give it one
    /// with [`TlsClientConfigBuilder::identity`]).
    Missing,
    /// The client's certificate does not chain to a CA the server trusts.
    UnknownIssuer,
    /// The client's certificate has expired (or is not valid yet).
    Expired,
    /// The client's certificate was revoked.
    Revoked,
    /// The server found the certificate bad or unsupported, or denied access.
    Rejected,
}

impl fmt::Display for ClientCertRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientCertRefusal::Missing => "it requires a client certificate and none was given",
            ClientCertRefusal::UnknownIssuer => "the client certificate's issuer is not trusted",
            ClientCertRefusal::Expired => "the client certificate has expired or is not valid yet",
            ClientCertRefusal::Revoked => "the client certificate was revoked",
            ClientCertRefusal::Rejected => "the client certificate was rejected",
        })
    }
}

impl ClientCertRefusal {
    /// The refusal an alert from the server means, if it is one about the client's
    /// certificate.
    pub(crate) fn of_alert(alert: AlertDescription) -> Option<Self> {
        Some(match alert {
            AlertDescription::CertificateRequired => ClientCertRefusal::Missing,
            AlertDescription::UnknownCA => ClientCertRefusal::UnknownIssuer,
            AlertDescription::CertificateExpired => ClientCertRefusal::Expired,
            AlertDescription::CertificateRevoked => ClientCertRefusal::Revoked,
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied => ClientCertRefusal::Rejected,
            _ => return None,
        })
    }

    /// The refusal a TLS alert code (QUIC carries it in a crypto error) means.
    #[cfg(feature = "quic")]
    pub(crate) fn of_alert_code(code: u8) -> Option<Self> {
        Self::of_alert(AlertDescription::from(code))
    }

    /// The refusal behind a rustls error, if it is the server's alert about our certificate.
    pub(crate) fn of_error(e: &rustls::Error) -> Option<Self> {
        match e {
            rustls::Error::AlertReceived(a) => Self::of_alert(*a),
            _ => None,
        }
    }
}

/// Why a TLS connection over TCP to a server could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The client refused the server's certificate.
    #[error("{server} at {addr}: server certificate for `{name}` refused: {problem}")]
    Certificate {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// The name the certificate was checked against.
        name: String,
        /// Why it was refused.
        problem: CertProblem,
    },
    /// The server refused this client in the handshake.
    #[error("{server} at {addr} refused this client: {reason}")]
    Refused {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// Why, from the server's alert.
        reason: ClientCertRefusal,
    },
    /// The handshake failed for another reason: a server that does not speak TLS on that
    /// port, a protocol or ALPN mismatch, a connection lost during the handshake. The read
    /// retries it on a replica, as a failed connect.
    #[error("{server} at {addr}: tls handshake: {detail}")]
    Handshake {
        /// The server.
        server: ServerId,
        /// Its address.
        addr: SocketAddr,
        /// What went wrong.
        detail: String,
    },
}

impl TlsFailure {
    /// Whether retrying elsewhere cannot help: a refused certificate on either side.
    pub fn is_permanent(&self) -> bool {
        matches!(self, TlsFailure::Certificate { .. } | TlsFailure::Refused { .. })
    }
}

/// TLS settings of a server's TCP listener. Build with [`TlsServerConfig::builder`]; hand it
/// to [`ServerConfigBuilder::tls`](crate::ServerConfigBuilder::tls).
#[derive(Clone)]
pub struct TlsServerConfig {
    crypto: Arc<rustls::ServerConfig>,
    client_certs: bool,
}

impl fmt::Debug for TlsServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The rustls configuration holds the key: not printed.
        f.debug_struct("TlsServerConfig")
            .field("client_certs", &self.client_certs)
            .finish_non_exhaustive()
    }
}

impl TlsServerConfig {
    /// A builder serving with `identity`, without client authentication.
    pub fn builder(identity: TlsIdentity) -> TlsServerConfigBuilder {
        TlsServerConfigBuilder {
            identity,
            client_certs: None,
        }
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certs(&self) -> bool {
        self.client_certs
    }

    pub(crate) fn crypto(&self) -> Arc<rustls::ServerConfig> {
        self.crypto.clone()
    }
}

/// Builds a [`TlsServerConfig`].
#[derive(Debug)]
pub struct TlsServerConfigBuilder {
    identity: TlsIdentity,
    client_certs: Option<TlsTrust>,
}

impl TlsServerConfigBuilder {
    /// Require every client to present a certificate that chains to `trust` (mutual TLS).
    /// Default: no client certificates asked for.
    pub fn client_certs(mut self, trust: TlsTrust) -> Self {
        self.client_certs = Some(trust);
        self
    }

    /// Builds the rustls configuration: refused if the key does not match the certificate.
    pub fn build(self) -> Result<TlsServerConfig, TlsError> {
        Ok(TlsServerConfig {
            crypto: Arc::new(self.identity.server_crypto(self.client_certs.as_ref())?),
            client_certs: self.client_certs.is_some(),
        })
    }
}

/// TLS settings of a client's TCP connections. Build with [`TlsClientConfig::builder`]; hand
/// it to [`ClientConfigBuilder::tls`](crate::ClientConfigBuilder::tls).
#[derive(Clone, Debug)]
pub struct TlsClientConfig {
    trust: TlsTrust,
    identity: Option<TlsIdentity>,
    server_name: Option<String>,
}

impl TlsClientConfig {
    /// A builder that trusts `trust` (there is no default trust and no way to skip
    /// verification), presenting no certificate.
    pub fn builder(trust: TlsTrust) -> TlsClientConfigBuilder {
        TlsClientConfigBuilder {
            cfg: TlsClientConfig {
                trust,
                identity: None,
                server_name: None,
            },
        }
    }

    /// Whether the client presents a certificate.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// A rustls configuration for one connection, with a verifier that records why it
    /// refused the server's certificate.
    pub(crate) fn crypto(&self) -> Result<(Arc<rustls::ClientConfig>, Arc<Recording>), TlsError> {
        let (cfg, verifier) = self.trust.client_crypto(self.identity.as_ref())?;
        Ok((Arc::new(cfg), verifier))
    }

    /// The name the certificate of the server at `addr` is checked against.
    pub(crate) fn name_for(&self, addr: SocketAddr) -> String {
        self.server_name.clone().unwrap_or_else(|| addr.ip().to_string())
    }
}

/// Builds a [`TlsClientConfig`].
#[derive(Clone, Debug)]
pub struct TlsClientConfigBuilder {
    cfg: TlsClientConfig,
}

impl TlsClientConfigBuilder {
    /// The certificate and key the client presents to servers that require one (mutual TLS).
    /// Default: none.
    pub fn identity(mut self, identity: TlsIdentity) -> Self {
        self.cfg.identity = Some(identity);
        self
    }

    /// The name every server's certificate is checked against: a DNS name or an IP address.
    /// Default: the server's IP address, which its certificate must then list.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.cfg.server_name = Some(name.into());
        self
    }

    /// Checks the name and builds the rustls configuration once: refused if the identity's key
    /// does not match its certificate.
    pub fn build(self) -> Result<TlsClientConfig, TlsError> {
        if let Some(name) = &self.cfg.server_name {
            ServerName::try_from(name.as_str()).map_err(|e| TlsError::Config(format!("server name `{name}`: {e}")))?;
        }
        self.cfg.crypto()?;
        Ok(self.cfg)
    }
}

/// A certificate chain (leaf first) and its private key: a server's identity, or a client's for mutual TLS.
#[derive(Debug)]
pub struct TlsIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for TlsIdentity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl TlsIdentity {
    /// Loads the chain (leaf first) and the private key (PKCS#8, PKCS#1 or SEC1) from PEM files.
    pub fn from_pem_files(chain: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<Self, TlsError> {
        let (chain_path, key_path) = (chain.as_ref(), key.as_ref());
        let read_err = |path: &Path, what, e: &dyn fmt::Display| TlsError::ReadPem {
            path: path.to_owned(),
            what,
            detail: e.to_string(),
        };
        let chain = CertificateDer::pem_file_iter(chain_path)
            .map_err(|e| read_err(chain_path, "certificate chain", &e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| read_err(chain_path, "certificate chain", &e))?;
        if chain.is_empty() {
            return Err(TlsError::Empty {
                path: chain_path.to_owned(),
                what: "certificate",
            });
        }
        let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
                path: key_path.to_owned(),
                what: "private key",
            },
            e => read_err(key_path, "private key", &e),
        })?;
        Ok(Self { chain, key })
    }

    /// An identity from DER: the chain (leaf first) and a PKCS#8 private key.
    pub fn from_der(chain: Vec<Vec<u8>>, pkcs8_key: Vec<u8>) -> Self {
        Self {
            chain: chain.into_iter().map(CertificateDer::from).collect(),
            key: PrivateKeyDer::Pkcs8(pkcs8_key.into()),
        }
    }

    /// The rustls server configuration (TLS 1.3 only, ALPN [`ALPN`]). With `clients`, every
    /// client must present a certificate that chains to it.
    pub(crate) fn server_crypto(&self, clients: Option<&TlsTrust>) -> Result<rustls::ServerConfig, TlsError> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(trust) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(trust.roots.clone(), provider())
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?,
            ),
        };
        let mut cfg = builder
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }
}

/// The certificates one side trusts: CA certificates, or exactly the self-signed certificate
/// of a test peer. A client trusts servers with it; a server requiring client certificates
/// trusts clients with it.
#[derive(Clone, Debug)]
pub struct TlsTrust {
    roots: Arc<RootCertStore>,
}

impl TlsTrust {
    /// Trusts every certificate in a PEM file (the CA that issued the servers' certificates).
    pub fn from_pem_file(path: impl AsRef<Path>) -> Result<Self, TlsError> {
        let path = path.as_ref();
        let read_err = |e: &dyn fmt::Display| TlsError::ReadPem {
            path: path.to_owned(),
            what: "CA certificates",
            detail: e.to_string(),
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| read_err(&e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| read_err(&e))?;
        if certs.is_empty() {
            return Err(TlsError::Empty {
                path: path.to_owned(),
                what: "certificate",
            });
        }
        Self::from_der(certs.into_iter().map(|c| c.to_vec()))
    }

    /// Trusts these DER certificates.
    pub fn from_der(certs: impl IntoIterator<Item = Vec<u8>>) -> Result<Self, TlsError> {
        let mut roots = RootCertStore::empty();
        for c in certs {
            roots
                .add(CertificateDer::from(c))
                .map_err(|e| TlsError::BadTrustAnchor(e.to_string()))?;
        }
        Ok(Self { roots: Arc::new(roots) })
    }

    /// A rustls client configuration whose verifier records why it refused a certificate;
    /// with `identity`, the client presents it to servers that ask for one.
    pub(crate) fn client_crypto(
        &self,
        identity: Option<&TlsIdentity>,
    ) -> Result<(rustls::ClientConfig, Arc<Recording>), TlsError> {
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let verifier = Arc::new(Recording {
            inner,
            refused: Mutex::new(None),
        });
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            // Not a way around verification: `Recording` hands every decision to the WebPKI
            // verifier built above and only keeps its reason for refusing.
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone());
        let mut cfg = match identity {
            None => builder.with_no_client_auth(),
            Some(id) => builder
                .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
                .map_err(|e| TlsError::Config(e.to_string()))?,
        };
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok((cfg, verifier))
    }
}

/// A WebPKI verifier that remembers why it refused a certificate, so the client can return a
/// typed [`CertProblem`] instead of a TLS alert number.
#[derive(Debug)]
pub(crate) struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    refused: Mutex<Option<CertProblem>>,
}

impl Recording {
    /// Why the certificate was refused, if it was.
    pub(crate) fn refused(&self) -> Option<CertProblem> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .inspect_err(|e| *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(CertProblem::of(e)))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .verify_tls13_signature(message, cert, dss)
            .inspect_err(|e| *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(CertProblem::of(e)))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A self-signed certificate and its key, generated in memory, for tests and demos.
///
/// ```
/// # fn main() -> Result<(), incast_rpc::quic::TlsError> {
/// use incast_rpc::quic::SelfSigned;
/// let cert = SelfSigned::generate(["localhost", "127.0.0.1"])?;
/// let (server_identity, client_trust) = (cert.identity(), cert.trust()?);
/// # let _ = (server_identity, client_trust);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SelfSigned {
    cert_der: Vec<u8>,
    cert_pem: String,
    key_der: Vec<u8>,
    key_pem: String,
}

impl fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelfSigned")
            .field("cert_der", &format_args!("{} bytes", self.cert_der.len()))
            .finish_non_exhaustive()
    }
}

impl SelfSigned {
    /// A certificate valid for these names: DNS names, or IP addresses written as text (which
    /// become IP address entries, so clients may connect by address).
    pub fn generate<I, S>(names: I) -> Result<Self, TlsError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let gen = |e: rcgen::Error| TlsError::Generate(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(gen)?;
        let mut params = rcgen::CertificateParams::new(names).map_err(gen)?;
        // A subject unique to this key: a client trusting another self-signed certificate then
        // reports an unknown issuer, not a bad signature from a same-named one.
        let id: String = key
            .public_key_raw()
            .iter()
            .rev()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("incast self-signed {id}"));
        let cert = params.self_signed(&key).map_err(gen)?;
        Ok(Self {
            cert_der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        })
    }

    /// This certificate and its key: a server's identity, or a client's for mutual TLS.
    pub fn identity(&self) -> TlsIdentity {
        TlsIdentity::from_der(vec![self.cert_der.clone()], self.key_der.clone())
    }

    /// Trust exactly this certificate (a client trusting this server, or a server trusting
    /// this client).
    pub fn trust(&self) -> Result<TlsTrust, TlsError> {
        TlsTrust::from_der([self.cert_der.clone()])
    }

    /// The certificate, PEM (to hand to clients on other hosts).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PEM (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }
}
