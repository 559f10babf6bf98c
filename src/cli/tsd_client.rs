//! How the `tsdb` tools that talk to a running TSD (`tsdb backup
//! --tsd`) reach it: plain TCP, or TLS trusting a given CA certificate
//! (`--ca-file`), with a token (`--token`, or `RTSDB_TOKEN`) for a TSD
//! with authentication on (docs/security.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The environment variable a token may come from, so that it need not
/// appear in a process listing.
pub(crate) const TOKEN_ENV: &str = "RTSDB_TOKEN";

/// A way to send one request to a TSD.
pub(crate) struct TsdClient {
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
}

impl TsdClient {
    /// `ca_file`: TLS, trusting that CA's certificates only.
    pub(crate) fn new(ca_file: Option<&Path>, token: Option<String>) -> anyhow::Result<TsdClient> {
        let tls = match ca_file {
            None => None,
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path)
                    .with_context(|| format!("reading CA file {}", path.display()))?
                {
                    let cert = cert.with_context(|| format!("CA file {}", path.display()))?;
                    roots
                        .add(cert)
                        .with_context(|| format!("CA file {}", path.display()))?;
                }
                // ring, as the server uses (src/tsd/tls.rs says why).
                #[allow(deprecated)]
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                Some(Arc::new(config))
            }
        };
        let token = token.or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()));
        Ok(TsdClient { tls, token })
    }

    /// One HTTP/1.1 POST without a body to `addr` (HOST:PORT); the status
    /// and the body.
    pub(crate) fn post(&self, addr: &str, target: &str) -> anyhow::Result<(u16, String)> {
        let mut request =
            format!("POST {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n");
        if let Some(t) = &self.token {
            request.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        request.push_str("Connection: close\r\n\r\n");
        let mut tcp = TcpStream::connect(addr)?;
        let mut raw = Vec::new();
        match &self.tls {
            None => {
                tcp.write_all(request.as_bytes())?;
                tcp.read_to_end(&mut raw)?;
            }
            Some(config) => {
                let host = addr
                    .rsplit_once(':')
                    .map_or(addr, |(h, _)| h)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let name = ServerName::try_from(host.to_string())
                    .with_context(|| format!("{host} is not a host name for TLS"))?;
                let conn = rustls::ClientConnection::new(config.clone(), name)?;
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                tls.write_all(request.as_bytes())?;
                // `Connection: close`: the server may end without a
                // close_notify, which is no error for a whole response.
                match tls.read_to_end(&mut raw) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .context("not an HTTP response")?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("not an HTTP response")?;
        Ok((status, body.to_string()))
    }
}
