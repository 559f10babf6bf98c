//! A TSBS-like devops load generator and query timer, speaking only
//! OpenTSDB's wire protocols, so the same run can load rtsdb and any peer
//! that accepts them (InfluxDB's OpenTSDB input, OpenTSDB itself).
//!
//! ```text
//! cargo run --release --example tsbs -- load  127.0.0.1:4242 [telnet|http|http-gzip|remote-write|influx] [hosts] [hours] [connections]
//! cargo run --release --example tsbs -- lines [hosts] [hours]        # the put lines, to stdout
//! cargo run --release --example tsbs -- query 127.0.0.1:4242 '/api/query?...' [runs]
//! cargo run --release --example tsbs -- alternate RUNS BLOCK ADDR PATH [ADDR PATH]...  # in turns
//! cargo run --release --example tsbs -- freshness A_ADDR B_ADDR [puts] [every_ms]
//! ```
//!
//! `freshness`: puts one point every `every_ms` (default 50) through TSD
//! A's `/api/put` (acknowledged once logged, without `sync`), `puts`
//! times (default 600), while polling TSD B with `/api/query` as fast as
//! it answers; prints the time from each point's acknowledgement by A to
//! the first answer of B that returns it (p50, p99, max).
//!
//! Data: `hosts` hosts × 10 cpu metrics every 10 s from 2016-01-01T00:00Z,
//! 8 tags per series (hostname, region, datacenter, rack, os, arch, team,
//! service); gauges with one decimal that wander, and two integer
//! counters. Deterministic: every run sends the same bytes.
//!
//! `http` sends each step as one `/api/put` JSON list; `http-gzip` sends
//! the same body gzipped (`Content-Encoding: gzip`, as collectors such as
//! tcollector and Telegraf can), compressed once per request by the
//! loader, so the server's share is the inflating and the parsing.
//! `remote-write` sends each step as one Prometheus remote write 1.0
//! request to `/api/v1/write` (snappy-compressed protobuf, as Prometheus
//! and vmagent send it, encoded once per request by the loader): the same
//! samples, with the metric as `__name__` (its dots as underscores,
//! `cpu_usage_user`: remote write takes Prometheus' metric names only, and
//! refuses a whole series named `cpu.usage_user`) and the tags as labels.
//! `influx` sends each step as one InfluxDB line protocol body to
//! `/write?precision=s`, as Telegraf writes: one line per host with the
//! measurement `cpu`, the host's tags and its ten metrics as fields
//! (`usage_user=12.3,…,interrupts=4567i`), so a receiver that joins
//! measurement and field with `.` stores the same series as telnet's.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const START: u64 = 1_451_606_400;
const METRICS: [&str; 10] = [
    "cpu.usage_user",
    "cpu.usage_system",
    "cpu.usage_idle",
    "cpu.usage_nice",
    "cpu.usage_iowait",
    "cpu.usage_irq",
    "cpu.usage_softirq",
    "cpu.usage_steal",
    "cpu.interrupts",
    "cpu.context_switches",
];
const REGIONS: [&str; 9] = [
    "us-east-1",
    "us-west-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-northeast-1",
    "sa-east-1",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn tags(h: usize) -> String {
    let region = REGIONS[h % REGIONS.len()];
    format!(
        "hostname=host_{h} region={region} datacenter={region}{} rack={} os={} arch={} team={} service={}",
        ['a', 'b', 'c'][h % 3],
        h % 100,
        ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"][h % 3],
        ["x64", "x86"][h % 2],
        ["SF", "NYC", "LON", "CHI"][h % 4],
        h % 20
    )
}

/// Per-series state, so values wander from one step to the next.
struct Series {
    metric: usize,
    host: usize,
    /// Gauges: tenths; counters: the running count.
    value: i64,
}

/// All put lines of one 10 s step, in `(host, metric)` order.
fn step_lines(
    series: &mut [Series],
    host_tags: &[String],
    t: u64,
    rng: &mut Rng,
    out: &mut Vec<u8>,
    with_put: bool,
) {
    for s in series.iter_mut() {
        let value = if s.metric >= 8 {
            s.value += 1000 + (rng.next() % 500) as i64;
            s.value.to_string()
        } else {
            s.value = (s.value + (rng.next() % 21) as i64 - 10).clamp(0, 1000);
            format!("{}.{}", s.value / 10, s.value % 10)
        };
        if with_put {
            out.extend_from_slice(b"put ");
        }
        let _ = writeln!(
            out,
            "{} {t} {value} {}",
            METRICS[s.metric], host_tags[s.host]
        );
    }
}

fn new_series(hosts: usize) -> (Vec<Series>, Vec<String>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut series = Vec::with_capacity(hosts * METRICS.len());
    for host in 0..hosts {
        for metric in 0..METRICS.len() {
            series.push(Series {
                metric,
                host,
                value: (rng.next() % 1000) as i64,
            });
        }
    }
    (series, (0..hosts).map(tags).collect())
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("lines") => lines(arg(&args, 1, 1000), arg(&args, 2, 1)),
        Some("load") => load(
            &args[1],
            args.get(2).map_or("telnet", |s| s),
            arg(&args, 3, 1000),
            arg(&args, 4, 1),
            arg(&args, 5, 4),
        ),
        Some("query") => query(&args[1], &args[2], arg(&args, 3, 20)),
        Some("alternate") => alternate(arg(&args, 1, 20), arg(&args, 2, 5), &args[3..]),
        Some("trace") => trace(&args[1], &args[2], arg(&args, 3, 30)),
        Some("freshness") => freshness(&args[1], &args[2], arg(&args, 3, 600), arg(&args, 4, 50)),
        _ => {
            eprintln!(
                "usage: tsbs load ADDR [telnet|http|http-gzip|remote-write|influx] [hosts] [hours] [connections] | tsbs lines [hosts] [hours] | tsbs query ADDR PATH [runs] | tsbs alternate RUNS BLOCK ADDR PATH [ADDR PATH]... | tsbs trace ADDR PATH [seconds] | tsbs freshness A_ADDR B_ADDR [puts] [every_ms]"
            );
            std::process::exit(2);
        }
    }
}

fn lines(hosts: usize, hours: u64) {
    let (mut series, host_tags) = new_series(hosts);
    let mut rng = Rng(42);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf = Vec::with_capacity(1 << 20);
    for step in 0..hours * 360 {
        buf.clear();
        step_lines(
            &mut series,
            &host_tags,
            START + step * 10,
            &mut rng,
            &mut buf,
            false,
        );
        if out.write_all(&buf).is_err() {
            return;
        }
    }
}

/// Sends every step to `connections` sockets, each carrying a fixed share
/// of the hosts, and prints points/s.
fn load(addr: &str, protocol: &str, hosts: usize, hours: u64, connections: usize) {
    let connections = connections.clamp(1, hosts);
    let started = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..connections)
            .map(|c| {
                scope.spawn(move || {
                    // This connection's hosts: c, c + connections, ...
                    let mine: Vec<usize> = (c..hosts).step_by(connections).collect();
                    let (all, host_tags) = new_series(hosts);
                    let mut series: Vec<Series> =
                        all.into_iter().filter(|s| mine.contains(&s.host)).collect();
                    let mut rng = Rng(42 + c as u64);
                    let mut stream =
                        TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
                    stream.set_nodelay(true).ok();
                    let mut sent = 0u64;
                    let mut buf = Vec::with_capacity(1 << 20);
                    for step in 0..hours * 360 {
                        let t = START + step * 10;
                        buf.clear();
                        if protocol == "remote-write" {
                            remote_write(&mut stream, &mut series, &host_tags, t, &mut rng);
                        } else if protocol == "influx" {
                            influx_write(&mut stream, &mut series, &host_tags, t, &mut rng);
                        } else if let Some(body) = HttpBody::of(protocol) {
                            http_put(&mut stream, &mut series, &host_tags, t, &mut rng, body);
                        } else {
                            step_lines(&mut series, &host_tags, t, &mut rng, &mut buf, true);
                            stream.write_all(&buf).expect("write");
                        }
                        sent += series.len() as u64;
                    }
                    if HttpBody::of(protocol).is_none()
                        && protocol != "remote-write"
                        && protocol != "influx"
                    {
                        // Half-close, then wait for the server to close: it
                        // has read every line by then.
                        stream.shutdown(std::net::Shutdown::Write).ok();
                        stream.set_read_timeout(Some(Duration::from_secs(120))).ok();
                        let mut rest = Vec::new();
                        stream.read_to_end(&mut rest).ok();
                    }
                    sent
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{total} points in {secs:.2} s: {:.0} points/s ({protocol}, {connections} connections)",
        total as f64 / secs
    );
}

/// How an `/api/put` body is sent.
#[derive(Clone, Copy, PartialEq)]
enum HttpBody {
    Plain,
    Gzip,
}

impl HttpBody {
    /// The body for a protocol argument; `None` for telnet.
    fn of(protocol: &str) -> Option<HttpBody> {
        match protocol {
            "http" => Some(HttpBody::Plain),
            "http-gzip" => Some(HttpBody::Gzip),
            _ => None,
        }
    }
}

/// One step's points as a JSON array in one `/api/put` request.
fn http_put(
    stream: &mut TcpStream,
    series: &mut [Series],
    host_tags: &[String],
    t: u64,
    rng: &mut Rng,
    kind: HttpBody,
) {
    let mut lines = Vec::new();
    step_lines(series, host_tags, t, rng, &mut lines, false);
    let mut body = String::from("[");
    for (i, line) in lines
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let line = std::str::from_utf8(line).expect("ascii");
        let mut words = line.split(' ');
        let (m, ts, v) = (
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
            words.next().unwrap_or(""),
        );
        let tags: Vec<String> = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| format!("\"{k}\":\"{v}\""))
            .collect();
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            "{{\"metric\":\"{m}\",\"timestamp\":{ts},\"value\":{v},\"tags\":{{{}}}}}",
            tags.join(",")
        ));
    }
    body.push(']');
    let (body, encoding) = match kind {
        HttpBody::Plain => (body.into_bytes(), ""),
        HttpBody::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(body.as_bytes()).expect("gzip");
            (gz.finish().expect("gzip"), "Content-Encoding: gzip\r\n")
        }
    };
    let head = format!(
        "POST /api/put HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n{encoding}Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(&body);
    stream.write_all(&req).expect("write");
    let (status, _) = read_response(stream);
    assert!(status == 204 || status == 200, "/api/put answered {status}");
}

/// Prometheus remote write 1.0's messages (prompb), as much as a sender
/// fills in.
mod prompb {
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

/// A devops metric as remote write sends it: `cpu.usage_user` is
/// `cpu_usage_user` (a dot is not in Prometheus' metric name rule).
fn prometheus_name(metric: &str) -> String {
    metric.replace('.', "_")
}

/// One step's points as one remote write 1.0 request.
fn remote_write(
    stream: &mut TcpStream,
    series: &mut [Series],
    host_tags: &[String],
    t: u64,
    rng: &mut Rng,
) {
    use prost::Message;
    let mut lines = Vec::new();
    step_lines(series, host_tags, t, rng, &mut lines, false);
    let mut req = prompb::WriteRequest::default();
    for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).expect("ascii");
        let mut words = line.split(' ');
        let metric = prometheus_name(words.next().unwrap_or(""));
        let ts: i64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let value: f64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0.0);
        let mut labels: Vec<prompb::Label> = std::iter::once(("__name__", metric.as_str()))
            .chain(words.filter_map(|w| w.split_once('=')))
            .map(|(name, value)| prompb::Label {
                name: name.into(),
                value: value.into(),
            })
            .collect();
        labels.sort_by(|a, b| a.name.cmp(&b.name));
        req.timeseries.push(prompb::TimeSeries {
            labels,
            samples: vec![prompb::Sample {
                value,
                timestamp: ts * 1000,
            }],
        });
    }
    let body = snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy");
    let head = format!(
        "POST /api/v1/write HTTP/1.1\r\nHost: bench\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 0.1.0\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut wire = head.into_bytes();
    wire.extend_from_slice(&body);
    stream.write_all(&wire).expect("write");
    let (status, answer) = read_response(stream);
    assert!(
        status == 204 || status == 200,
        "/api/v1/write answered {status}: {}",
        String::from_utf8_lossy(&answer)
    );
}

/// One step's points as one InfluxDB line protocol request: consecutive
/// points of one measurement and tag set (a host's ten `cpu.*` metrics)
/// are one line, integers with their `i`.
fn influx_write(
    stream: &mut TcpStream,
    series: &mut [Series],
    host_tags: &[String],
    t: u64,
    rng: &mut Rng,
) {
    let mut lines = Vec::new();
    step_lines(series, host_tags, t, rng, &mut lines, false);
    let mut body = String::with_capacity(lines.len());
    let mut open: Option<(String, String)> = None;
    for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).expect("ascii");
        // `metric t value tags`: every line of a step has its time `t`.
        let mut words = line.splitn(4, ' ');
        let metric = words.next().unwrap_or("");
        let (value, tags) = (words.nth(1).unwrap_or(""), words.next().unwrap_or(""));
        let (measurement, field) = metric.split_once('.').unwrap_or((metric, "value"));
        let int = if value.contains('.') { "" } else { "i" };
        let key = (measurement.to_string(), tags.to_string());
        if open.as_ref() == Some(&key) {
            body.push_str(&format!(",{field}={value}{int}"));
        } else {
            if open.take().is_some() {
                body.push_str(&format!(" {t}\n"));
            }
            body.push_str(&format!(
                "{measurement},{} {field}={value}{int}",
                tags.replace(' ', ",")
            ));
            open = Some(key);
        }
    }
    if open.is_some() {
        body.push_str(&format!(" {t}\n"));
    }
    let head = format!(
        "POST /write?db=bench&precision=s HTTP/1.1\r\nHost: bench\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut wire = head.into_bytes();
    wire.extend_from_slice(body.as_bytes());
    stream.write_all(&wire).expect("write");
    let (status, answer) = read_response(stream);
    assert!(
        status == 204 || status == 200,
        "/write answered {status}: {}",
        String::from_utf8_lossy(&answer)
    );
}

/// Reads one HTTP/1.1 response with a Content-Length (or none) body.
fn read_response(stream: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut len = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).expect("header");
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("chunk size");
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk).expect("chunk");
            body.extend_from_slice(&chunk[..n]);
            if n == 0 {
                break;
            }
        }
    } else {
        body.resize(len, 0);
        reader.read_exact(&mut body).expect("body");
    }
    (status, body)
}

/// Times a GET over one keep-alive connection; prints median and p90.
fn query(addr: &str, path: &str, runs: usize) {
    alternate(runs, runs, &[addr.to_string(), path.to_string()]);
}

/// Times several GETs (ADDR PATH pairs), each over its own keep-alive
/// connection, asked in turns of `block` back-to-back requests: `block` to
/// the first, `block` to the second, ..., until each has `runs` measured
/// answers. Prints one line per pair, in order: median and p90. On a
/// machine whose speed drifts from one minute to the next, answers timed
/// this way were timed under the same conditions; each pair still answers
/// mostly back to back, as `query` times it: asked right after another
/// server's answer, rtsdb's one-host query took 0.12 ms here against
/// 0.04 ms back to back, VictoriaMetrics' 0.17 against 0.14 ms.
fn alternate(runs: usize, block: usize, pairs: &[String]) {
    assert!(
        runs > 0 && block > 0 && !pairs.is_empty() && pairs.len().is_multiple_of(2),
        "alternate: RUNS > 0, BLOCK > 0 and ADDR PATH pairs"
    );
    let mut gets: Vec<Getter> = pairs.chunks(2).map(|p| Getter::new(&p[0], &p[1])).collect();
    let mut times = vec![Vec::with_capacity(runs); gets.len()];
    let mut sizes = vec![0; gets.len()];
    // Two unmeasured answers first: connections, caches and lazy set-up.
    for get in &mut gets {
        get.ask();
        get.ask();
    }
    while times[0].len() < runs {
        for (j, get) in gets.iter_mut().enumerate() {
            for _ in 0..block.min(runs - times[j].len()) {
                let t = Instant::now();
                sizes[j] = get.ask().len();
                times[j].push(t.elapsed());
            }
        }
    }
    for (times, size) in times.iter_mut().zip(sizes) {
        times.sort();
        println!(
            "median {:.3} ms  p90 {:.3} ms  ({size} bytes)",
            times[runs / 2].as_secs_f64() * 1000.0,
            times[runs * 9 / 10].as_secs_f64() * 1000.0
        );
    }
}

/// The query asked back to back for `secs` seconds, one line per answer:
/// milliseconds since the first request began, then the answer's latency
/// in milliseconds. Shows what a query costs at each moment of a seal
/// (bench/seal-latency.sh).
fn trace(addr: &str, path: &str, secs: u64) {
    let mut get = Getter::new(addr, path);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let t = Instant::now();
        get.ask();
        println!(
            "{:.0} {:.3}",
            t.duration_since(start).as_secs_f64() * 1000.0,
            t.elapsed().as_secs_f64() * 1000.0
        );
    }
}

/// One GET asked again and again over a keep-alive connection.
struct Getter {
    stream: TcpStream,
    request: String,
}

impl Getter {
    fn new(addr: &str, path: &str) -> Getter {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: application/json\r\n\r\n");
        Getter { stream, request }
    }

    /// The answer's body; panics unless it is a 200.
    fn ask(&mut self) -> Vec<u8> {
        self.stream
            .write_all(self.request.as_bytes())
            .expect("write");
        let (status, body) = read_response(&mut self.stream);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        body
    }
}

/// One HTTP request over a keep-alive connection: status and body.
fn exchange(stream: &mut TcpStream, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).expect("write");
    read_response(stream)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Time from "TSD A acknowledged a point" to "TSD B returns it" (issue
/// 12: within 5 s, aim for 1 s), over `puts` points of one series put
/// `every_ms` apart; see the module doc.
fn freshness(a: &str, b: &str, puts: usize, every_ms: u64) {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    // A series of this run only: its timestamps are the moments of the
    // puts (milliseconds, one apart at least).
    let run = format!("{}_{}", std::process::id(), now_ms());
    let metric = "bench.freshness";
    // Timestamp (ms) -> when A acknowledged it.
    let acked: Arc<Mutex<BTreeMap<u64, Instant>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first_ts = now_ms();
    let writer = {
        let (acked, done, run, a) = (acked.clone(), done.clone(), run.clone(), a.to_string());
        std::thread::spawn(move || {
            let mut stream = TcpStream::connect(&a).unwrap_or_else(|e| panic!("connect {a}: {e}"));
            stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
            let mut last = 0;
            for i in 0..puts {
                let ts = now_ms().max(last + 1);
                last = ts;
                let body = format!(
                    r#"{{"metric":"{metric}","timestamp":{ts},"value":{i},"tags":{{"run":"{run}"}}}}"#
                );
                let (status, answer) = exchange(&mut stream, "POST", "/api/put", &body);
                assert_eq!(status, 204, "{}", String::from_utf8_lossy(&answer));
                acked.lock().unwrap().insert(ts, Instant::now());
                std::thread::sleep(Duration::from_millis(every_ms));
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    let mut stream = TcpStream::connect(b).unwrap_or_else(|e| panic!("connect {b}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let mut latencies: Vec<Duration> = Vec::with_capacity(puts);
    let mut polls = 0u64;
    let deadline_after_last = Duration::from_secs(60);
    let mut all_put_at: Option<Instant> = None;
    while latencies.len() < puts {
        let path = format!(
            "/api/query?start={first_ts}&end={}&ms=true&nocache=true&m=sum:{metric}%7Brun={run}%7D",
            now_ms() + 1000
        );
        let (status, body) = exchange(&mut stream, "GET", &path, "");
        let seen_at = Instant::now();
        polls += 1;
        // 400 "No such name": B does not know the run's names yet (A has
        // not assigned them, or not acknowledged a point), so nothing to
        // see.
        assert!(
            status == 200 || status == 400,
            "{}",
            String::from_utf8_lossy(&body)
        );
        let v: serde_json::Value = if status == 200 {
            serde_json::from_slice(&body).expect("query JSON")
        } else {
            serde_json::Value::Null
        };
        let seen: Vec<u64> = v
            .get(0)
            .and_then(|r| r.get("dps"))
            .and_then(|d| d.as_object())
            .map(|d| d.keys().filter_map(|k| k.parse().ok()).collect())
            .unwrap_or_default();
        let mut acked = acked.lock().unwrap();
        for ts in seen {
            // Seen before A's answer reached us (A's flusher ran first):
            // zero, as freshness cannot be negative.
            if let Some(at) = acked.remove(&ts) {
                latencies.push(seen_at.saturating_duration_since(at));
            }
        }
        drop(acked);
        if done.load(std::sync::atomic::Ordering::Acquire) {
            let at = *all_put_at.get_or_insert_with(Instant::now);
            if at.elapsed() > deadline_after_last {
                eprintln!(
                    "{} of {puts} points never seen on B within {deadline_after_last:?} of the last put",
                    puts - latencies.len()
                );
                break;
            }
        }
    }
    writer.join().expect("the writer");
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pick = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "freshness over {} points, one every {every_ms} ms ({polls} queries of B): p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms",
        latencies.len(),
        ms(pick(0.5)),
        ms(pick(0.99)),
        ms(*latencies.last().expect("at least one point seen"))
    );
}
