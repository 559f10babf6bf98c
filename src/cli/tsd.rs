//! `tsdb tsd`: starts the TSD with OpenTSDB's command-line flags, which
//! override the configuration file. With no file and no flags it serves
//! 127.0.0.1:4242 over a store in `--data-dir`.

use std::io::Write;

use clap::Args;

use crate::tsd::{Server, TsdOptions, TsdState};

use super::Context;

#[derive(Debug, Args)]
pub struct TsdArgs {
    /// TCP port to listen on (tsd.network.port; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to bind to (tsd.network.bind; default 127.0.0.1).
    #[arg(long)]
    pub bind: Option<String>,
    /// Create metrics on first write (tsd.core.auto_create_metrics).
    #[arg(long)]
    pub auto_metric: bool,
    /// rw, ro or wo (tsd.mode).
    #[arg(long)]
    pub mode: Option<String>,
    /// Same as --mode=ro. Takes an optional value, ignored, as OpenTSDB's
    /// `--read-only true|false` (any value turns it on there too).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "true|false")]
    pub read_only: Option<String>,
    /// Maximum open connections, 0 = unlimited (tsd.core.connections.limit).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// WAL fsync period in milliseconds (tsd.storage.flush_interval).
    #[arg(long)]
    pub flush_interval: Option<u64>,
    /// Close connections idle this many seconds (tsd.core.socket.timeout).
    #[arg(long)]
    pub socket_timeout: Option<u64>,
    /// Disable the legacy UI endpoints (tsd.core.enable_ui=false); an
    /// optional value is ignored, as in OpenTSDB.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "true|false")]
    pub disable_ui: Option<String>,
    /// Disable /api endpoints (tsd.core.enable_api=false); an optional
    /// value is ignored, as in OpenTSDB.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "true|false")]
    pub disable_api: Option<String>,
    /// Accepted for compatibility (tsd.network.async_io).
    #[arg(long, value_name = "true|false")]
    pub async_io: Option<String>,
    /// Include the port in every stat's tags (tsd.core.stats_with_port).
    #[arg(long)]
    pub statswport: bool,
    /// Runtime worker threads (tsd.network.worker_threads).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// Accepted for compatibility (tsd.network.backlog).
    #[arg(long)]
    pub backlog: Option<u32>,
    /// Accepted for compatibility (tsd.http.staticroot).
    #[arg(long)]
    pub staticroot: Option<String>,
    /// Accepted for compatibility (tsd.http.cachedir).
    #[arg(long)]
    pub cachedir: Option<String>,
}

impl TsdArgs {
    fn apply(&self, ctx: &mut Context) {
        let c = &mut ctx.config;
        if let Some(p) = self.port {
            c.set("tsd.network.port", &p.to_string());
        }
        if let Some(b) = &self.bind {
            c.set("tsd.network.bind", b);
        }
        if self.auto_metric {
            c.set("tsd.core.auto_create_metrics", "true");
        }
        if let Some(m) = &self.mode {
            c.set("tsd.mode", m);
        }
        if self.read_only.is_some() {
            c.set("tsd.mode", "ro");
        }
        if let Some(n) = self.max_connections {
            c.set("tsd.core.connections.limit", &n.to_string());
        }
        if let Some(ms) = self.flush_interval {
            c.set("tsd.storage.flush_interval", &ms.to_string());
        }
        if let Some(s) = self.socket_timeout {
            c.set("tsd.core.socket.timeout", &s.to_string());
        }
        if self.disable_ui.is_some() {
            c.set("tsd.core.enable_ui", "false");
        }
        if self.disable_api.is_some() {
            c.set("tsd.core.enable_api", "false");
        }
        if let Some(v) = &self.async_io {
            c.set("tsd.network.async_io", v);
        }
        if self.statswport {
            c.set("tsd.core.stats_with_port", "true");
        }
        if let Some(n) = self.worker_threads {
            c.set("tsd.network.worker_threads", &n.to_string());
        }
        if let Some(n) = self.backlog {
            c.set("tsd.network.backlog", &n.to_string());
        }
        if let Some(s) = &self.staticroot {
            c.set("tsd.http.staticroot", s);
        }
        if let Some(s) = &self.cachedir {
            c.set("tsd.http.cachedir", s);
        }
    }
}

pub(crate) fn run(mut ctx: Context, args: TsdArgs, out: &mut dyn Write) -> anyhow::Result<i32> {
    args.apply(&mut ctx);
    // Options first: a bad value stops the start before the store opens.
    let options = TsdOptions::from_config(&ctx.config)?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = options.worker_threads.filter(|n| *n > 0) {
        rt.worker_threads(n);
    }
    let rt = rt.build()?;
    let state = TsdState::open_with(options, ctx.config.clone())?;
    rt.block_on(async {
        let signals = crate::tsd::server::Signals::install();
        let handle = Server::start(state.clone()).await?;
        tracing::info!(addr = %handle.addr, data_dir = %ctx.config.data_dir().display(), "Ready to serve on {}", handle.addr);
        writeln!(out, "Ready to serve on {}", handle.addr)?;
        out.flush()?;
        signals.wait(state.clone()).await;
        handle.wait().await?;
        tracing::info!("TSD stopped");
        anyhow::Ok(())
    })?;
    Ok(0)
}
