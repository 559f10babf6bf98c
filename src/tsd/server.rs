//! The listener: one port for both protocols. The first byte of a
//! connection decides (OpenTSDB's `DetectHttpOrRpc`): an ASCII capital
//! letter means HTTP, anything else the telnet-style protocol. With TLS
//! configured (`super::tls`), a first byte 0x16 is a TLS handshake: the
//! first decrypted byte then decides the same way.
//!
//! Connections over `tsd.core.connections.limit` are closed at once; idle
//! connections are closed after `tsd.core.socket.timeout` seconds (if set).
//! Shutdown (SIGTERM, SIGINT, `diediedie`, [`ServerHandle::shutdown`])
//! stops accepting, lets connections finish their current work, then
//! flushes the write path.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::stats::inc;
use super::{TsdError, TsdState};

/// How long shutdown waits for open connections before closing them.
const DRAIN: Duration = Duration::from_secs(10);
/// How long a TLS handshake may take (when `tsd.core.socket.timeout` is
/// not set shorter), so half-open handshakes do not hold connections.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Server;

/// A running server.
pub struct ServerHandle {
    pub addr: SocketAddr,
    pub state: Arc<TsdState>,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// Asks the server to stop.
    pub fn shutdown(&self) {
        self.state.request_shutdown();
    }

    /// Waits until the server stopped and the database is flushed and
    /// closed.
    pub async fn wait(self) -> Result<(), TsdError> {
        let _ = self.task.await;
        let db = self.state.db.clone();
        tokio::task::spawn_blocking(move || db.close())
            .await
            .map_err(|e| TsdError::Close(e.to_string()))??;
        Ok(())
    }
}

/// Counts an open connection for as long as it lives.
struct ConnGuard(Arc<TsdState>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0
            .stats
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Server {
    /// Binds `bind:port` (port 0 picks a free one) and starts serving.
    pub async fn start(state: Arc<TsdState>) -> Result<ServerHandle, TsdError> {
        let addr = format!("{}:{}", state.options.bind, state.options.port);
        let bind_error = |cause| TsdError::Bind {
            addr: addr.clone(),
            cause,
        };
        let listener = TcpListener::bind(&addr).await.map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        state.port.store(addr.port(), Ordering::Relaxed);
        let graphite = super::graphite::start(&state).await?;
        let s = state.clone();
        let task = tokio::spawn(async move {
            accept_loop(s, listener).await;
            if let Some(g) = graphite {
                let _ = g.await;
            }
        });
        reload_tls_on_sighup(&state);
        Ok(ServerHandle { addr, state, task })
    }
}

/// SIGHUP reads the TLS certificate and key again (when TLS is on; SIGHUP
/// keeps its default meaning otherwise).
fn reload_tls_on_sighup(state: &Arc<TsdState>) {
    #[cfg(unix)]
    if state.tls.is_some() {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("no SIGHUP handler: TLS certificates reload only on restart");
            return;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut shutdown = state.shutdown_signal();
            loop {
                tokio::select! {
                    r = hup.recv() => {
                        if r.is_none() {
                            return;
                        }
                        if let Err(e) = state.reload_tls() {
                            tracing::error!(error = %e, "TLS reload failed; the certificate in use stays");
                        }
                    }
                    _ = super::stopped(&mut shutdown) => return,
                }
            }
        });
    }
}

async fn accept_loop(state: Arc<TsdState>, listener: TcpListener) {
    let mut shutdown = state.shutdown_signal();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    inc(&state.stats.exceptions);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = super::stopped(&mut shutdown) => break,
        };
        let limit = state.options.connections_limit;
        let open = state.stats.connections_open.load(Ordering::Relaxed);
        if limit > 0 && open as usize >= limit {
            inc(&state.stats.connections_rejected);
            drop(stream);
            continue;
        }
        state.stats.connections_open.fetch_add(1, Ordering::Relaxed);
        inc(&state.stats.connections_total);
        let _ = stream.set_nodelay(true);
        let guard = ConnGuard(state.clone());
        tokio::spawn(async move {
            let state = guard.0.clone();
            handle_connection(state, stream, peer).await;
            drop(guard);
        });
    }
    drop(listener);
    let deadline = Instant::now() + DRAIN;
    while state.stats.connections_open.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn handle_connection(state: Arc<TsdState>, stream: TcpStream, peer: SocketAddr) {
    let mut first = [0u8; 1];
    let timeout = state.options.socket_timeout;
    let mut shutdown = state.shutdown_signal();
    let peeked = tokio::select! {
        r = async {
            if timeout.is_zero() {
                stream.peek(&mut first).await.ok()
            } else {
                tokio::time::timeout(timeout, stream.peek(&mut first)).await.ok().and_then(|r| r.ok())
            }
        } => r,
        _ = super::stopped(&mut shutdown) => None,
    };
    match peeked {
        Some(n) if n > 0 => {}
        _ => return,
    }
    match &state.tls {
        Some(tls) if first[0] == super::tls::HANDSHAKE => {
            let limit = match timeout.is_zero() {
                true => HANDSHAKE_TIMEOUT,
                false => timeout.min(HANDSHAKE_TIMEOUT),
            };
            let stream = match tokio::time::timeout(limit, tls.acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            // The first decrypted byte, read into the buffer and left
            // there for the protocol that reads it.
            let mut stream = tokio::io::BufReader::new(stream);
            let first = match stream.fill_buf().await {
                Ok([b, ..]) => *b,
                _ => return,
            };
            serve(state, stream, peer, first).await;
        }
        Some(tls) if tls.required => {
            tracing::debug!(%peer, "plaintext connection closed: tsd.network.tls.required");
        }
        _ => serve(state, stream, peer, first[0]).await,
    }
}

/// Serves a connection by the protocol its first byte names.
async fn serve<S>(state: Arc<TsdState>, stream: S, peer: SocketAddr, first: u8)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if first.is_ascii_uppercase() {
        serve_http(state, stream, peer).await;
    } else {
        super::telnet::serve(state, stream, peer).await;
    }
}

/// Wraps a stream to remember when it last moved bytes (idle timeout).
struct Activity<S> {
    inner: S,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl<S> Activity<S> {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Activity<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if r.is_ready() {
            self.touch();
        }
        r
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Activity<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if r.is_ready() {
            self.touch();
        }
        r
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn serve_http<S>(state: Arc<TsdState>, stream: S, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let last = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let io = TokioIo::new(Activity {
        inner: stream,
        last: last.clone(),
        epoch,
    });
    let st = state.clone();
    let memo = super::http::ConnMemo::default();
    let svc = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(memo.clone());
        if st.auth.is_some() {
            req.extensions_mut().insert(super::http::access::Peer(peer));
        }
        super::http::serve_request(st.clone(), req)
    });
    let mut builder = http1::Builder::new();
    builder.keep_alive(true).timer(TokioTimer::new());
    let timeout = state.options.socket_timeout;
    if !timeout.is_zero() {
        builder.header_read_timeout(timeout);
    }
    let mut conn = pin!(builder.serve_connection(io, svc));
    let mut shutdown = state.shutdown_signal();
    let mut draining = false;
    loop {
        let idle_check = async {
            if timeout.is_zero() {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(timeout / 4).await
            }
        };
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = super::stopped(&mut shutdown), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = idle_check => {
                let idle_ms = epoch.elapsed().as_millis() as u64 - last.load(Ordering::Relaxed);
                if idle_ms >= timeout.as_millis() as u64 {
                    inc(&state.stats.connections_idle_closed);
                    return;
                }
            }
        }
    }
}

/// SIGTERM/SIGINT handlers, installed before the server announces itself
/// so that a signal sent right after "Ready" stops it gracefully.
pub(crate) struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Must be called inside the runtime.
    pub(crate) fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Runs until SIGTERM/SIGINT or another shutdown request, then asks
    /// the server to stop.
    pub(crate) async fn wait(mut self, state: Arc<TsdState>) {
        let mut shutdown = state.shutdown_signal();
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                match s.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.term) => tracing::info!("SIGTERM received; shutting down"),
                _ = recv(&mut self.int) => tracing::info!("SIGINT received; shutting down"),
                _ = super::stopped(&mut shutdown) => tracing::info!("shutdown requested"),
            }
        }
        #[cfg(not(unix))]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = super::stopped(&mut shutdown) => {},
        }
        state.request_shutdown();
    }
}
