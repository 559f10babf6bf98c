//! The `tsdb` binary: parses the command line and hands over to
//! `rtsdb::cli`. Errors become a message on stderr and a non-zero exit.

use clap::Parser;

/// See Cargo.toml: glibc's allocator kept freed memory per thread arena,
/// so a TSD's RSS grew with the data it had written.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = rtsdb::cli::Cli::parse();
    // The engine logs every recovery step at info; keep that out of the way.
    let level = if cli.verbose {
        "debug"
    } else {
        "info,fjall=warn,lsm_tree=warn"
    };
    // Colour codes only on a terminal: a log file or a pipe (journald,
    // a collector) gets plain text. The last lines are also kept for /logs.
    if let Err(e) =
        rtsdb::tsd::logs::install(level, std::io::IsTerminal::is_terminal(&std::io::stderr()))
    {
        eprintln!("warning: logging not set up: {e}");
    }
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
