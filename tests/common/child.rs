//! `tsdb tsd` as a child process, for tests that kill it (SIGKILL or
//! SIGTERM) and start it again on the same data directory.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a child TSD is started beyond its data directory.
#[derive(Default, Clone, Copy)]
pub struct ChildOptions<'a> {
    /// `--flush-interval` in ms (the TSD's default when `None`).
    pub flush_interval_ms: Option<u64>,
    /// `--config FILE`.
    pub config: Option<&'a Path>,
    /// Where its stderr goes (discarded when `None`).
    pub log: Option<&'a Path>,
    /// More `tsd` arguments.
    pub args: &'a [&'a str],
}

/// A running `tsdb tsd` on a free loopback port; killed if a failing test
/// drops it still running.
pub struct ChildTsd {
    child: Option<Child>,
    pub addr: SocketAddr,
}

impl ChildTsd {
    /// Starts `tsdb tsd --port 0 --auto-metric` on `data` and waits until it
    /// serves.
    pub fn start(data: &Path, o: ChildOptions) -> ChildTsd {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
        if let Some(conf) = o.config {
            cmd.arg("--config").arg(conf);
        }
        cmd.args(["tsd", "--port", "0", "--auto-metric"]);
        if let Some(ms) = o.flush_interval_ms {
            cmd.args(["--flush-interval", &ms.to_string()]);
        }
        cmd.args(o.args);
        let stderr = match o.log {
            Some(log) => Stdio::from(std::fs::File::create(log).unwrap()),
            None => Stdio::null(),
        };
        let mut child = cmd
            .arg("--data-dir")
            .arg(data)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(addr) = line.trim().strip_prefix("Ready to serve on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("unexpected first line {line:?}");
        };
        ChildTsd {
            addr: addr.parse().unwrap(),
            child: Some(child),
        }
    }

    /// SIGKILL: what was not written out is lost, as in a crash.
    pub fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// SIGTERM, then waits for the graceful stop to end.
    pub fn terminate(mut self) -> ExitStatus {
        let mut c = self.child.take().unwrap();
        // SAFETY: kill(2) on the PID of a child this handle has not reaped.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        c.wait().unwrap()
    }
}

impl Drop for ChildTsd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `tsdb tsd` on `store` and expects it to exit with an error
/// within 30 s (a TSD that starts serving fails the test, not hangs it);
/// returns what it printed on stderr.
pub fn tsd_refuses(store: &Path) -> String {
    tsd_refuses_with(None, store, Duration::from_secs(30))
}

/// [`tsd_refuses`] with a config file (`tsdb --config FILE tsd ...`) and
/// a deadline of the caller's.
pub fn tsd_refuses_with(config: Option<&Path>, store: &Path, deadline: Duration) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let mut child = cmd
        .args(["tsd", "--port", "0", "--data-dir"])
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + deadline;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the TSD started on {} where it must refuse",
                store.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    err
}
