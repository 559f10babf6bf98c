//! Ingest benchmark: replays a TSBS-like data set (hosts × 10 metrics,
//! 8 tags each, one point per 10 s) into a child `tsdb tsd` over telnet
//! and over `/api/put`, with several connections, and prints points/s,
//! the server's CPU seconds and its peak RSS.
//!
//!     cargo bench --bench ingest
//!     BENCH_HOSTS=1000 BENCH_MINUTES=60 BENCH_CONNS=4 cargo bench --bench ingest
//!
//! Durability is on: every point goes through the WAL (fdatasync every
//! `tsd.storage.flush_interval`, default 1 s), as in production.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const METRICS: [&str; 10] = [
    "cpu.usage_user",
    "cpu.usage_system",
    "cpu.usage_idle",
    "mem.used_percent",
    "disk.used_percent",
    "diskio.reads",
    "net.bytes_recv",
    "net.bytes_sent",
    "kernel.context_switches",
    "nginx.requests",
];
const REGIONS: [&str; 3] = ["us-east-1", "eu-west-1", "ap-south-1"];
const START: u64 = 1_451_606_400; // 2016-01-01, as TSBS

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Point {
    metric: &'static str,
    ts: u64,
    value: f64,
    host: usize,
}

fn tags(host: usize) -> String {
    format!(
        "hostname=host_{host} region={} datacenter={}a rack={} os=Ubuntu16.04LTS arch=x64 team=SF service={}",
        REGIONS[host % 3],
        REGIONS[host % 3],
        host % 100,
        host % 20
    )
}

/// The data set in time order, split round-robin by host over `conns`.
fn dataset(hosts: usize, minutes: usize, conns: usize) -> Vec<Vec<Point>> {
    let mut out: Vec<Vec<Point>> = (0..conns).map(|_| Vec::new()).collect();
    for step in 0..(minutes * 6) as u64 {
        for host in 0..hosts {
            for (mi, metric) in METRICS.iter().enumerate() {
                out[host % conns].push(Point {
                    metric,
                    ts: START + step * 10,
                    value: ((host * 31 + mi * 7) as u64 + step) as f64 * 0.5,
                    host,
                });
            }
        }
    }
    out
}

fn spawn(dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["tsd", "--port", "0", "--auto-metric", "--data-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tsdb tsd");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("Ready to serve on ")
        .expect("ready line")
        .parse()
        .unwrap();
    (child, addr)
}

/// (CPU seconds, peak RSS in MiB) of a process.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        / tick;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0;
    (cpu, hwm)
}

fn stop(mut child: Child) {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
}

fn telnet_payloads(data: &[Vec<Point>]) -> Vec<Vec<u8>> {
    data.iter()
        .map(|pts| {
            let mut buf = Vec::with_capacity(pts.len() * 220);
            let tag_cache: std::collections::HashMap<usize, String> = Default::default();
            let mut tag_cache = tag_cache;
            for p in pts {
                let t = tag_cache.entry(p.host).or_insert_with(|| tags(p.host));
                writeln!(buf, "put {} {} {} {t}", p.metric, p.ts, p.value).unwrap();
            }
            buf.extend_from_slice(b"version\n");
            buf
        })
        .collect()
}

fn http_payloads(data: &[Vec<Point>], batch: usize) -> Vec<Vec<Vec<u8>>> {
    data.iter()
        .map(|pts| {
            pts.chunks(batch)
                .map(|chunk| {
                    let mut body = Vec::with_capacity(chunk.len() * 300);
                    body.push(b'[');
                    for (i, p) in chunk.iter().enumerate() {
                        if i > 0 {
                            body.push(b',');
                        }
                        let tags: Vec<String> = tags(p.host)
                            .split(' ')
                            .map(|kv| {
                                let (k, v) = kv.split_once('=').unwrap();
                                format!("\"{k}\":\"{v}\"")
                            })
                            .collect();
                        write!(
                            body,
                            r#"{{"metric":"{}","timestamp":{},"value":{},"tags":{{{}}}}}"#,
                            p.metric,
                            p.ts,
                            p.value,
                            tags.join(",")
                        )
                        .unwrap();
                    }
                    body.push(b']');
                    let mut req = format!(
                        "POST /api/put HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    req.extend_from_slice(&body);
                    req
                })
                .collect()
        })
        .collect()
}

fn run_telnet(addr: SocketAddr, payloads: Vec<Vec<u8>>) {
    let threads: Vec<_> = payloads
        .into_iter()
        .map(|p| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let mut r = s.try_clone().unwrap();
                let reader = std::thread::spawn(move || {
                    // Errors would arrive here; the data set has none. The
                    // `version` reply (2 lines) marks the end.
                    let mut out = Vec::new();
                    let mut buf = [0u8; 4096];
                    while out.iter().filter(|b| **b == b'\n').count() < 2 {
                        let n = r.read(&mut buf).unwrap();
                        assert!(n > 0, "server closed");
                        out.extend_from_slice(&buf[..n]);
                    }
                    let text = String::from_utf8_lossy(&out).to_string();
                    if !text.starts_with("net.opentsdb") {
                        eprintln!("server errors: {}", text.lines().next().unwrap_or(""));
                        std::process::exit(1);
                    }
                });
                s.write_all(&p).unwrap();
                reader.join().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn run_http(addr: SocketAddr, payloads: Vec<Vec<Vec<u8>>>) {
    let threads: Vec<_> = payloads
        .into_iter()
        .map(|reqs| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let mut buf = vec![0u8; 8192];
                for req in reqs {
                    s.write_all(&req).unwrap();
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = s.read(&mut buf).unwrap();
                        assert!(n > 0);
                        got.extend_from_slice(&buf[..n]);
                    }
                    assert!(
                        got.starts_with(b"HTTP/1.1 204"),
                        "{}",
                        String::from_utf8_lossy(&got)
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let hosts = env("BENCH_HOSTS", 1000);
    let minutes = env("BENCH_MINUTES", 20);
    let conns = env("BENCH_CONNS", 4);
    let batch = env("BENCH_BATCH", 5000);
    let data = dataset(hosts, minutes, conns);
    let total: usize = data.iter().map(|d| d.len()).sum();
    println!(
        "data set: {hosts} hosts x {} metrics x 8 tags, {minutes} min at 10 s = {total} points, {conns} connections",
        METRICS.len()
    );

    let telnet = telnet_payloads(&data);
    let bytes: usize = telnet.iter().map(|p| p.len()).sum();
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = spawn(dir.path());
    let (cpu0, _) = usage(child.id());
    let t = Instant::now();
    run_telnet(addr, telnet);
    let secs = t.elapsed().as_secs_f64();
    let (cpu1, rss) = usage(child.id());
    println!(
        "telnet:   {:>10.0} points/s  ({total} points, {:.1} MB in {secs:.2} s; server CPU {:.2} s = {:.0} points/CPU-s; peak RSS {rss:.0} MiB)",
        total as f64 / secs,
        bytes as f64 / 1e6,
        cpu1 - cpu0,
        total as f64 / (cpu1 - cpu0).max(1e-9)
    );
    stop(child);

    let http = http_payloads(&data, batch);
    let bytes: usize = http.iter().flatten().map(|p| p.len()).sum();
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = spawn(dir.path());
    let (cpu0, _) = usage(child.id());
    let t = Instant::now();
    run_http(addr, http);
    let secs = t.elapsed().as_secs_f64();
    let (cpu1, rss) = usage(child.id());
    println!(
        "/api/put: {:>10.0} points/s  ({total} points in {batch}-point bodies, {:.1} MB in {secs:.2} s; server CPU {:.2} s = {:.0} points/CPU-s; peak RSS {rss:.0} MiB)",
        total as f64 / secs,
        bytes as f64 / 1e6,
        cpu1 - cpu0,
        total as f64 / (cpu1 - cpu0).max(1e-9)
    );
    stop(child);
}
