//! The `tsdb` binary: parses the command line and hands over to
//! `rtsdb::cli`. Errors become a message on stderr and a non-zero exit.

use clap::Parser;

fn main() {
    let cli = rtsdb::cli::Cli::parse();
    // The engine logs every recovery step at info; keep that out of the way.
    let level = if cli.verbose {
        "debug"
    } else {
        "info,fjall=warn,lsm_tree=warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log file or a pipe (journald,
        // a collector) gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Unlocked handles: the TSD logs to stderr from other threads while
    // `run` is still running, so holding the stderr lock here would block them.
    let code = match rtsdb::cli::run(cli, &mut std::io::stdout(), &mut std::io::stderr()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
