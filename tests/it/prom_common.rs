//! What the Prometheus tests (`prom_diff`, `prom_clients`) share: the
//! Debian binaries they start (Prometheus 2.42, node exporter, vmagent,
//! vmalert) as child processes on free loopback ports, stopped by PID;
//! an HTTP client for their APIs and rtsdb's; and remote write 1.0
//! encoded here, from hand-declared protobuf messages and snappy's block
//! format, so that the tests check rtsdb's decoder against an encoding of
//! their own rather than against rtsdb's types.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message as _;

/// Where the Debian packages put the binaries the tests start.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";
pub const VMAGENT: &str = "/usr/bin/vmagent";
pub const VMALERT: &str = "/usr/bin/vmalert";

/// The path of an installed binary, or `None` after printing why the
/// test is skipped. In CI (`CI=true`) a missing binary fails the test
/// instead: CI installs them (`scripts/with-cluster`), so a missing one
/// is a broken install, not a reason to pass.
pub fn binary(path: &str, test: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.is_file() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: {path} is missing in CI (scripts/with-cluster installs it)"
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: {path} is not installed (apt-get install prometheus prometheus-node-exporter victoria-metrics)"
    );
    None
}

/// A loopback port nobody listens on at the moment of asking. Another
/// process may take it before the child binds it; the child then fails
/// to start and says so in its log, which the test shows.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A child process the test started, its output in a log file; killed
/// by its PID and reaped when dropped.
pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `cmd` with stdout and stderr into `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Process {
        let out = File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().expect("a second handle on the log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Process {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    /// The last lines of the process' log, to show when it misbehaves.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Polls `url` until it answers 200, failing the test (with the log)
    /// if the process exits or `within` passes first.
    pub fn wait_ready(&mut self, url: &str, within: Duration) {
        let deadline = Instant::now() + within;
        let agent = agent(Duration::from_secs(2));
        loop {
            if let Ok(resp) = agent.get(url).call()
                && resp.status().as_u16() == 200
            {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "{} exited ({status}) before {url} answered:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer {url} within {within:?}:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the PID of a child not yet reaped. SIGTERM
            // first so Prometheus closes its storage; SIGKILL if it lingers.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Prometheus 2.42 started by the test: remote-write receiver on, a
/// storage directory of its own, the configuration given.
pub struct Prometheus {
    pub port: u16,
    // Dropped before `dir`: the process lets go of its storage first.
    process: Process,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `binary` with the configuration (YAML) `config` writes for
    /// the port Prometheus will listen on, and waits for `/-/ready`.
    pub fn start(binary: &Path, config: impl FnOnce(u16) -> String) -> Prometheus {
        let dir = tempfile::tempdir().expect("a temp dir");
        let conf = dir.path().join("prometheus.yml");
        let port = free_port();
        std::fs::write(&conf, config(port)).expect("the config file");
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-remote-write-receiver")
            .arg("--log.level=warn");
        let mut process = Process::spawn("prometheus", cmd, &dir.path().join("prometheus.log"));
        process.wait_ready(
            &format!("http://127.0.0.1:{port}/-/ready"),
            Duration::from_secs(60),
        );
        Prometheus {
            port,
            process,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// `prometheus-node-exporter` on a free loopback port, with only the
/// collectors that are quick and need no privileges (cpu among them, for
/// `node_cpu_seconds_total`).
pub struct NodeExporter {
    pub port: u16,
    process: Process,
    _dir: tempfile::TempDir,
}

impl NodeExporter {
    pub fn start(binary: &Path) -> NodeExporter {
        let dir = tempfile::tempdir().expect("a temp dir");
        let port = free_port();
        let mut cmd = Command::new(binary);
        cmd.arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--collector.disable-defaults")
            .args([
                "--collector.cpu",
                "--collector.loadavg",
                "--collector.meminfo",
                "--collector.time",
            ]);
        let mut process = Process::spawn("node exporter", cmd, &dir.path().join("node.log"));
        process.wait_ready(
            &format!("http://127.0.0.1:{port}/metrics"),
            Duration::from_secs(30),
        );
        NodeExporter {
            port,
            process,
            _dir: dir,
        }
    }

    pub fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// An HTTP client that hands back every status (a 400 is an answer to
/// compare, not an error) and gives up on a hang after `timeout`.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Status and body of a GET of `url` with `params` in its query string.
pub fn get(agent: &ureq::Agent, url: &str, params: &[(&str, &str)]) -> (u16, String) {
    let mut req = agent.get(url);
    for (k, v) in params {
        req = req.query(*k, *v);
    }
    match req.call() {
        Ok(resp) => answer(resp, "GET", url),
        Err(e) => panic!("GET {url} {params:?}: {e}"),
    }
}

/// Status and body (up to 256 MiB) of a response to `method url`.
fn answer(mut resp: ureq::http::Response<ureq::Body>, method: &str, url: &str) -> (u16, String) {
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(256 << 20)
        .read_to_string()
        .unwrap_or_else(|e| panic!("{method} {url}: reading the body: {e}"));
    (status, body)
}

/// Status and body of a POST of `params` as a form
/// (`application/x-www-form-urlencoded`).
pub fn post_form(agent: &ureq::Agent, url: &str, params: &[(&str, &str)]) -> (u16, String) {
    match agent.post(url).send_form(params.iter().copied()) {
        Ok(resp) => answer(resp, "POST", url),
        Err(e) => panic!("POST {url} {params:?}: {e}"),
    }
}

/// Status and body of a GET, the body parsed as JSON.
pub fn get_json(
    agent: &ureq::Agent,
    url: &str,
    params: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    let (status, body) = get(agent, url, params);
    let json = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("GET {url} {params:?}: {status}, not JSON ({e}): {body}"));
    (status, json)
}

/// The settings of the TSDs these tests start: new metric names are
/// created as they arrive (OpenTSDB's `tsd.core.auto_create_metrics`,
/// off by default), as every Prometheus sender expects of its store.
pub const TSD_SETTINGS: &[(&str, &str)] = &[("tsd.core.auto_create_metrics", "true")];

/// Prometheus' stale marker: a NaN with this payload ends a series.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// Remote write 1.0's messages (`prometheus.WriteRequest`), declared here
/// from the protocol's field numbers.
pub mod remote {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// One series to push: its labels (`__name__` among them) and samples
/// (ms, value) in time order.
#[derive(Clone, Debug)]
pub struct PushSeries {
    pub labels: Vec<(String, String)>,
    pub samples: Vec<(i64, f64)>,
}

/// The snappy-compressed `WriteRequest` of `series`, labels sorted by
/// name as senders sort them.
pub fn encode_write(series: &[PushSeries]) -> Vec<u8> {
    let req = remote::WriteRequest {
        timeseries: series
            .iter()
            .map(|s| {
                let mut labels: Vec<remote::Label> = s
                    .labels
                    .iter()
                    .map(|(name, value)| remote::Label {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect();
                labels.sort_by(|a, b| a.name.cmp(&b.name));
                remote::TimeSeries {
                    labels,
                    samples: s
                        .samples
                        .iter()
                        .map(|&(timestamp, value)| remote::Sample { value, timestamp })
                        .collect(),
                }
            })
            .collect(),
    };
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy compresses any buffer")
}

/// POSTs a remote-write 1.0 body to `url`; the status and body text.
pub fn push(agent: &ureq::Agent, url: &str, body: &[u8]) -> (u16, String) {
    let resp = agent
        .post(url)
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .send(body);
    match resp {
        Ok(mut r) => (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        ),
        Err(e) => panic!("POST {url}: {e}"),
    }
}

/// Pushes `series` to `url` in time windows of `window_ms`, every series'
/// samples of a window in one request, windows in time order: Prometheus
/// 2.42 refuses a sample older than one it already has in the series, and
/// samples far behind its newest. Fails the test on any answer but 204.
pub fn push_in_time_order(agent: &ureq::Agent, url: &str, series: &[PushSeries], window_ms: i64) {
    let refused = try_push_in_time_order(agent, url, series, window_ms);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// [`push_in_time_order`] that goes on past a refused request: what was
/// refused, one line per request (empty when every request got 204).
pub fn try_push_in_time_order(
    agent: &ureq::Agent,
    url: &str,
    series: &[PushSeries],
    window_ms: i64,
) -> Vec<String> {
    let mut refused = Vec::new();
    let Some(first) = series
        .iter()
        .filter_map(|s| s.samples.first())
        .map(|p| p.0)
        .min()
    else {
        return refused;
    };
    let last = series
        .iter()
        .filter_map(|s| s.samples.last())
        .map(|p| p.0)
        .max()
        .unwrap_or(first);
    let mut from = first;
    while from <= last {
        let to = from + window_ms;
        let batch: Vec<PushSeries> = series
            .iter()
            .map(|s| PushSeries {
                labels: s.labels.clone(),
                samples: s
                    .samples
                    .iter()
                    .copied()
                    .filter(|&(t, _)| t >= from && t < to)
                    .collect(),
            })
            .filter(|s| !s.samples.is_empty())
            .collect();
        if !batch.is_empty() {
            let (status, body) = push(agent, url, &encode_write(&batch));
            if status != 204 {
                refused.push(format!(
                    "remote write to {url} of samples from {from} to {to}: {status} {}",
                    body.trim()
                ));
            }
        }
        from = to;
    }
    refused
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_millis() as i64
}
