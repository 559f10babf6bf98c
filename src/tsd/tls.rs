//! TLS on the one port (`tsd.network.tls.cert_file`, `key_file`,
//! `required`; docs/security.md). A connection whose first byte is 0x16
//! (a TLS handshake record) is handshaken with rustls, then its first
//! decrypted byte picks telnet or HTTP exactly as on a plaintext
//! connection, so both protocols work over TLS on the same port.
//! Plaintext connections are still served unless `required` is set.
//!
//! The certificate and key are read at start and again on SIGHUP (or
//! [`TsdState::reload_tls`](super::TsdState::reload_tls)): a resolver
//! hands each new handshake the current pair from behind an `Arc` that a
//! reload swaps, so connections open at the time are not dropped. A
//! reload that fails (a missing file, a key that does not match) is
//! logged and the pair in use stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use thiserror::Error;
use tokio_rustls::TlsAcceptor;

use crate::config::{Config, ConfigError};

/// The first byte of a TLS handshake record.
pub(crate) const HANDSHAKE: u8 = 0x16;

/// `tsd.network.tls.*`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsOptions {
    /// PEM certificate chain and private key; TLS is on when both are set.
    pub files: Option<(PathBuf, PathBuf)>,
    /// `tsd.network.tls.required`: plaintext connections are closed.
    pub required: bool,
}

impl TlsOptions {
    pub fn from_config(c: &Config) -> Result<TlsOptions, ConfigError> {
        let cert = c.get_string("tsd.network.tls.cert_file").trim();
        let key = c.get_string("tsd.network.tls.key_file").trim();
        let required = c.get_bool("tsd.network.tls.required");
        let files = match (cert, key) {
            ("", "") => None,
            ("", _) | (_, "") => {
                return Err(ConfigError::bad_value(
                    "tsd.network.tls.cert_file",
                    cert,
                    "TLS needs both tsd.network.tls.cert_file and tsd.network.tls.key_file",
                ));
            }
            (c, k) => Some((PathBuf::from(c), PathBuf::from(k))),
        };
        if required && files.is_none() {
            return Err(ConfigError::bad_value(
                "tsd.network.tls.required",
                "true",
                "needs tsd.network.tls.cert_file and tsd.network.tls.key_file",
            ));
        }
        Ok(TlsOptions { files, required })
    }
}

/// Why TLS could not be set up or reloaded.
#[derive(Debug, Error)]
pub enum TlsError {
    #[error("TLS certificate {path}: {why}")]
    Cert { path: String, why: String },
    #[error("TLS private key {path}: {why}")]
    Key { path: String, why: String },
    #[error("TLS setup: {0}")]
    Setup(String),
}

/// The current certificate and key, swapped on reload.
#[derive(Debug)]
struct Certs {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

fn load(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_err = |why: String| TlsError::Cert {
        path: cert_file.display().to_string(),
        why,
    };
    let key_err = |why: String| TlsError::Key {
        path: key_file.display().to_string(),
        why,
    };
    let chain = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| cert_err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(e.to_string()))?;
    if chain.is_empty() {
        return Err(cert_err("no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| key_err(e.to_string()))?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| key_err(e.to_string()))?;
    let pair = CertifiedKey::new(chain, signer);
    pair.keys_match().map_err(|e| key_err(e.to_string()))?;
    Ok(pair)
}

/// The server's TLS side.
pub(crate) struct Tls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) required: bool,
    certs: Arc<Certs>,
}

impl Tls {
    /// `None` when TLS is not configured.
    pub(crate) fn open(options: &TlsOptions) -> Result<Option<Tls>, TlsError> {
        let Some((cert_file, key_file)) = &options.files else {
            return Ok(None);
        };
        let certs = Arc::new(Certs {
            current: RwLock::new(Arc::new(load(cert_file, key_file)?)),
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
        });
        // ring rather than rustls' default aws-lc-rs: no C++/cmake build
        // and a fraction of its compile time. rustls 0.23.48 deprecates
        // ring's provider because it has no post-quantum key exchange;
        // that is the trade made (docs/security.md, out of scope).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        // hyper serves HTTP/1.1 only; telnet clients send no ALPN.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        tracing::info!(cert = %cert_file.display(), required = options.required, "TLS on");
        Ok(Some(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            required: options.required,
            certs,
        }))
    }

    /// Reads the certificate and key again; new handshakes use them.
    pub(crate) fn reload(&self) -> Result<(), TlsError> {
        let pair = load(&self.certs.cert_file, &self.certs.key_file)?;
        *self.certs.current.write() = Arc::new(pair);
        tracing::info!(cert = %self.certs.cert_file.display(), "TLS certificate reloaded");
        Ok(())
    }
}
