//! TLS 1.3 for the QUIC transport: server identities, client trust, and typed certificate
//! errors.
//!
//! QUIC always encrypts; there is no plaintext mode and nothing here turns verification off.
//! Two ways to set it up:
//!
//! - **Tests and demos:** [`SelfSigned::generate`] makes a certificate and key at start (rcgen);
//!   the server uses [`SelfSigned::identity`], the client trusts exactly that certificate with
//!   [`SelfSigned::trust`].
//! - **Production:** the server loads its chain and key with [`TlsIdentity::from_pem_files`];
//!   clients trust the issuing CA with [`TlsTrust::from_pem_file`].
//!
//! The client checks the server's certificate with rustls's WebPKI verifier (chain, validity
//! period, name). When it refuses one, the read fails with
//! [`QuicError::Certificate`](super::QuicError::Certificate) carrying a [`CertProblem`]
//! (expired, wrong name, unknown issuer, ...), not a generic handshake failure: the verifier is
//! wrapped only to remember why it refused.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The ALPN protocol both sides insist on: a QUIC endpoint of something else is refused in the
/// handshake instead of being sent fragment requests.
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

/// A server's certificate chain and private key.
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

    /// The rustls server configuration (TLS 1.3 only, ALPN [`ALPN`]).
    pub(crate) fn server_crypto(&self) -> Result<rustls::ServerConfig, TlsError> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        cfg.alpn_protocols = vec![ALPN.to_vec()];
        Ok(cfg)
    }
}

/// The certificates a client trusts: CA certificates, or exactly the self-signed certificate of
/// a test server.
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

    /// A rustls client configuration whose verifier records why it refused a certificate.
    pub(crate) fn client_crypto(&self) -> Result<(rustls::ClientConfig, Arc<Recording>), TlsError> {
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let verifier = Arc::new(Recording {
            inner,
            refused: Mutex::new(None),
        });
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            // Not a way around verification: `Recording` hands every decision to the WebPKI
            // verifier built above and only keeps its reason for refusing.
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_no_client_auth();
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

    /// The server side: this certificate and its key.
    pub fn identity(&self) -> TlsIdentity {
        TlsIdentity::from_der(vec![self.cert_der.clone()], self.key_der.clone())
    }

    /// The client side: trust exactly this certificate.
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
