//! Real Prometheus-world clients against rtsdb, from Debian's packages,
//! on both backends:
//!
//! - Prometheus 2.42 scraping itself and `prometheus-node-exporter` every
//!   second with `remote_write` to rtsdb: the same series arrive, and
//!   `up`, `rate(node_cpu_seconds_total[1m])` and a range of
//!   `scrape_samples_scraped` answer as on the scraping Prometheus.
//! - vmagent scraping node exporter into rtsdb's `/api/v1/write`: every
//!   metric the exporter serves arrives.
//! - vmalert evaluating a recording and an alerting rule with rtsdb as its
//!   datasource (`/prometheus`) and remote-write target: the recorded
//!   series lands in rtsdb with the right values, and the alert fires
//!   (`ALERTS{alertstate="firing"}` in rtsdb and in vmalert's own API).
//!
//! A missing binary skips a test with a printed reason, and fails it in CI.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use super::common::{Backend, Tsds, on_both_backends};
use super::prom_common::{
    self as pc, NODE_EXPORTER, NodeExporter, PROMETHEUS, Process, Prometheus, PushSeries,
    TSD_SETTINGS, VMAGENT, VMALERT,
};
use super::prom_diff::{Answer, LabelSet, diff_answers, show_labels};

/// How long a client gets to deliver what the test waits for.
const DELIVERY: Duration = Duration::from_secs(90);

/// Calls `check` every second until it returns `Ok`, or fails the test
/// with its last complaint (and `context`, e.g. a child's log) once
/// `within` has passed.
fn eventually<T>(
    what: &str,
    within: Duration,
    context: &dyn Fn() -> String,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}: {why}\n{}", context())
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// Seconds with a fraction, as the query API takes times.
fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// An instant query's answer at `t_ms`.
fn instant(agent: &ureq::Agent, api: &str, query: &str, t_ms: i64) -> Answer {
    let (status, body) = pc::get(
        agent,
        &format!("{api}/query"),
        &[("query", query), ("time", &secs(t_ms))],
    );
    Answer::from_http(status, &body)
}

/// A range query's answer.
fn range(agent: &ureq::Agent, api: &str, query: &str, start: i64, end: i64, step: i64) -> Answer {
    let (status, body) = pc::get(
        agent,
        &format!("{api}/query_range"),
        &[
            ("query", query),
            ("start", &secs(start)),
            ("end", &secs(end)),
            ("step", &secs(step)),
        ],
    );
    Answer::from_http(status, &body)
}

/// The label sets `/series` gives for `matcher` between `start` and `end`.
fn series_set(
    agent: &ureq::Agent,
    api: &str,
    matcher: &str,
    start: i64,
    end: i64,
) -> Result<BTreeSet<LabelSet>, String> {
    let (status, json) = pc::get_json(
        agent,
        &format!("{api}/series"),
        &[
            ("match[]", matcher),
            ("start", &secs(start)),
            ("end", &secs(end)),
        ],
    );
    if status != 200 || json["status"] != "success" {
        return Err(format!("/series: {status} {json}"));
    }
    let items = json["data"]
        .as_array()
        .ok_or("/series: data not an array")?;
    items
        .iter()
        .map(|item| {
            item.as_object()
                .ok_or("/series: an item not an object")?
                .iter()
                .map(|(k, v)| {
                    v.as_str()
                        .map(|s| (k.clone(), s.to_string()))
                        .ok_or_else(|| format!("/series: label {k} not a string"))
                })
                .collect::<Result<LabelSet, String>>()
        })
        .collect()
}

/// Whether `answer` is a vector holding a series with every label of
/// `want`.
fn vector_has(answer: &Answer, want: &[(&str, &str)]) -> bool {
    let Answer::Vector(v) = answer else {
        return false;
    };
    v.iter().any(|(l, _)| {
        want.iter()
            .all(|(k, val)| l.get(*k).is_some_and(|x| x == val))
    })
}

/// Where a client writes and what the test reads back: rtsdb, or (to
/// check the test's own expectations on the reference) a second
/// Prometheus with its remote-write receiver.
struct Receiver<'a> {
    /// `http://host:port`: vmalert's `-remoteWrite.url` (it adds
    /// `/api/v1/write`).
    write_base: String,
    /// `http://host:port/prefix`: vmalert's `-datasource.url` (it adds
    /// `/api/v1/query`); the query API is under `{read_base}/api/v1`.
    read_base: String,
    /// Makes what was written visible to reads (the cluster's second TSD).
    settle: Box<dyn Fn() + 'a>,
}

impl<'a> Receiver<'a> {
    fn rtsdb(tsds: &'a Tsds) -> Receiver<'a> {
        Receiver {
            write_base: format!("http://{}", tsds.writer().addr),
            read_base: format!("http://{}/prometheus", tsds.reader().addr),
            settle: Box::new(|| tsds.settle()),
        }
    }

    fn prometheus(prom: &Prometheus) -> Receiver<'static> {
        Receiver {
            write_base: prom.url(),
            read_base: prom.url(),
            settle: Box::new(|| ()),
        }
    }

    fn write_url(&self) -> String {
        format!("{}/api/v1/write", self.write_base)
    }

    /// The query API, after settling.
    fn api(&self) -> String {
        (self.settle)();
        format!("{}/api/v1", self.read_base)
    }
}

/// Runs `body` against rtsdb on `backend`.
fn on_rtsdb(backend: Backend, body: impl FnOnce(&Receiver)) {
    let Some(tsds) = Tsds::start(backend, TSD_SETTINGS) else {
        return;
    };
    body(&Receiver::rtsdb(&tsds));
}

/// Runs `body` against a second Prometheus: the test's expectations
/// checked on the reference itself.
fn on_prometheus(test: &str, body: impl FnOnce(&Receiver)) {
    let Some(bin) = pc::binary(PROMETHEUS, test) else {
        return;
    };
    let prom = Prometheus::start(&bin, |_| "global:\n  scrape_interval: 1m\n".to_string());
    body(&Receiver::prometheus(&prom));
}

// ---------------------------------------------------------------------------
// Prometheus scraping, remote write into the receiver
// ---------------------------------------------------------------------------

fn prometheus_remote_write(backend: Backend) {
    let test = format!("prom_clients::prometheus_remote_write ({backend:?})");
    on_rtsdb(backend, |r| scrape_and_write(&test, r));
}

/// Prometheus scraping itself and node exporter, writing to `receiver`;
/// the receiver must answer as the scraping Prometheus does.
fn scrape_and_write(test: &str, receiver: &Receiver) {
    let (Some(prom_bin), Some(node_bin)) = (
        pc::binary(PROMETHEUS, test),
        pc::binary(NODE_EXPORTER, test),
    ) else {
        return;
    };
    let node = NodeExporter::start(&node_bin);
    let write_url = receiver.write_url();
    let target = node.target();
    let prom = Prometheus::start(&prom_bin, |port| {
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n\
             \x20 - job_name: prometheus\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n\
             \x20 - job_name: node\n    static_configs:\n      - targets: ['{target}']\n\
             remote_write:\n\
             \x20 - url: {write_url}\n    queue_config:\n      batch_send_deadline: 1s\n      max_samples_per_send: 5000\n"
        )
    });
    let started = Instant::now();
    let agent = pc::agent(Duration::from_secs(60));
    let prom_api = format!("{}/api/v1", prom.url());
    let context = || {
        format!(
            "prometheus log:\n{}\nnode exporter log:\n{}",
            prom.log_tail(),
            node.log_tail()
        )
    };
    // Both jobs scraped and written through to rtsdb.
    eventually(
        "up for both jobs in the receiver",
        DELIVERY,
        &context,
        || {
            let ours = receiver.api();
            let a = instant(&agent, &ours, "up", pc::now_ms());
            if vector_has(&a, &[("job", "node")]) && vector_has(&a, &[("job", "prometheus")]) {
                Ok(())
            } else {
                Err(format!("{a:?}"))
            }
        },
    );
    // A few more seconds of scrapes, so that rate() over 1m has samples.
    let scraped_for = Duration::from_secs(15);
    if let Some(rest) = scraped_for.checked_sub(started.elapsed()) {
        std::thread::sleep(rest);
    }
    // Compared a few seconds back, where both hold every sample; retried
    // while remote write catches up.
    eventually(
        "the receiver answering as the scraping Prometheus",
        Duration::from_secs(30),
        &context,
        || {
            let ours = receiver.api();
            let t = (pc::now_ms() / 1000 - 5) * 1000;
            let mut diffs = Vec::new();
            let want = series_set(
                &agent,
                &prom_api,
                "{job=~\"node|prometheus\"}",
                t - 10_000,
                t,
            )?;
            let have = series_set(&agent, &ours, "{job=~\"node|prometheus\"}", t - 10_000, t)?;
            if want.len() < 50 {
                return Err(format!("Prometheus has only {} series", want.len()));
            }
            for l in want.difference(&have).take(10) {
                diffs.push(format!("/series: only in Prometheus: {}", show_labels(l)));
            }
            for l in have.difference(&want).take(10) {
                diffs.push(format!("/series: only in rtsdb: {}", show_labels(l)));
            }
            for q in ["up", "rate(node_cpu_seconds_total[1m])"] {
                let d = diff_answers(
                    &instant(&agent, &prom_api, q, t),
                    &instant(&agent, &ours, q, t),
                    false,
                );
                diffs.extend(d.into_iter().map(|l| format!("{q} at {t}: {l}")));
            }
            let q = "scrape_samples_scraped";
            let d = diff_answers(
                &range(&agent, &prom_api, q, t - 15_000, t, 1_000),
                &range(&agent, &ours, q, t - 15_000, t, 1_000),
                false,
            );
            diffs.extend(d.into_iter().map(|l| format!("{q} over 15 s: {l}")));
            if diffs.is_empty() {
                Ok(())
            } else {
                Err(diffs.join("\n"))
            }
        },
    );
}

// ---------------------------------------------------------------------------
// vmagent
// ---------------------------------------------------------------------------

/// The metric names of a Prometheus text exposition.
fn exposed_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

fn vmagent_remote_write(backend: Backend) {
    let test = format!("prom_clients::vmagent_remote_write ({backend:?})");
    on_rtsdb(backend, |r| vmagent_scrape(&test, r));
}

/// vmagent scraping node exporter into `receiver`: every metric name the
/// exporter serves arrives, and `up`.
fn vmagent_scrape(test: &str, receiver: &Receiver) {
    let (Some(vmagent_bin), Some(node_bin)) =
        (pc::binary(VMAGENT, test), pc::binary(NODE_EXPORTER, test))
    else {
        return;
    };
    let node = NodeExporter::start(&node_bin);
    let dir = tempfile::tempdir().expect("a temp dir");
    let scrape = dir.path().join("scrape.yml");
    std::fs::write(
        &scrape,
        format!(
            "scrape_configs:\n  - job_name: node\n    scrape_interval: 1s\n    static_configs:\n      - targets: ['{}']\n",
            node.target()
        ),
    )
    .expect("the scrape config");
    let port = pc::free_port();
    let mut cmd = Command::new(vmagent_bin);
    cmd.arg(format!("-promscrape.config={}", scrape.display()))
        .arg(format!("-remoteWrite.url={}", receiver.write_url()))
        .arg(format!(
            "-remoteWrite.tmpDataPath={}",
            dir.path().join("queue").display()
        ))
        .arg("-remoteWrite.flushInterval=1s")
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"));
    let mut vmagent = Process::spawn("vmagent", cmd, &dir.path().join("vmagent.log"));
    vmagent.wait_ready(
        &format!("http://127.0.0.1:{port}/health"),
        Duration::from_secs(30),
    );
    let agent = pc::agent(Duration::from_secs(60));
    let (_, metrics) = pc::get(&agent, &format!("http://{}/metrics", node.target()), &[]);
    let mut want = exposed_names(&metrics);
    assert!(
        want.contains("node_cpu_seconds_total"),
        "node exporter serves no node_cpu_seconds_total: {want:?}"
    );
    // vmagent's own series about each scrape.
    want.insert("up".into());
    want.insert("scrape_samples_scraped".into());
    let context = || format!("vmagent log:\n{}", vmagent.log_tail());
    eventually(
        "node exporter's metrics in the receiver",
        DELIVERY,
        &context,
        || {
            let ours = receiver.api();
            let (status, json) =
                pc::get_json(&agent, &format!("{ours}/label/__name__/values"), &[]);
            if status != 200 {
                return Err(format!("label values: {status} {json}"));
            }
            let have: BTreeSet<String> = json["data"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let missing: Vec<&String> = want.difference(&have).collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{} of {} names missing, among them {:?}",
                    missing.len(),
                    want.len(),
                    &missing[..missing.len().min(10)]
                ));
            }
            let up = instant(&agent, &ours, "up{job=\"node\"} == 1", pc::now_ms());
            if !vector_has(&up, &[("instance", &node.target())]) {
                return Err(format!("up{{job=\"node\"}} == 1: {up:?}"));
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------
// vmalert
// ---------------------------------------------------------------------------

const RULES: &str = "\
groups:
  - name: rtsdb_test
    interval: 1s
    rules:
      - record: job:test_requests:sum
        expr: sum by (job) (test_requests_total)
      - alert: TestQueueTooDeep
        expr: test_queue_depth > 5
        for: 0s
        labels:
          severity: page
        annotations:
          summary: 'queue {{ $labels.host }} holds {{ $value }}'
";

fn vmalert_rules(backend: Backend) {
    let test = format!("prom_clients::vmalert_rules ({backend:?})");
    on_rtsdb(backend, |r| vmalert_against(&test, r));
}

/// vmalert with `receiver` as datasource and remote-write target: the
/// recorded series and the firing alert land there.
fn vmalert_against(test: &str, receiver: &Receiver) {
    let Some(vmalert_bin) = pc::binary(VMALERT, test) else {
        return;
    };
    // The last four minutes of the series the rules read, so that the
    // lookback finds them while the test runs.
    let now = pc::now_ms();
    let ticks: Vec<i64> = (0..16).map(|k| now - 240_000 + k * 15_000).collect();
    let requests = [("api", "a", 3.0), ("api", "b", 4.5), ("db", "a", 10.0)];
    let mut data: Vec<PushSeries> = requests
        .iter()
        .map(|(job, instance, per)| PushSeries {
            labels: vec![
                ("__name__".into(), "test_requests_total".into()),
                ("job".into(), job.to_string()),
                ("instance".into(), instance.to_string()),
            ],
            samples: ticks
                .iter()
                .enumerate()
                .map(|(k, &t)| (t, per * (k + 1) as f64))
                .collect(),
        })
        .collect();
    for (host, depth) in [("q1", 9.0), ("q2", 1.0)] {
        data.push(PushSeries {
            labels: vec![
                ("__name__".into(), "test_queue_depth".into()),
                ("host".into(), host.into()),
            ],
            samples: ticks.iter().map(|&t| (t, depth)).collect(),
        });
    }
    let agent = pc::agent(Duration::from_secs(60));
    pc::push_in_time_order(&agent, &receiver.write_url(), &data, 600_000);
    // Visible to the reads vmalert makes (on the cluster, through the
    // second TSD) before it starts.
    (receiver.settle)();
    let mut expected_sums: BTreeMap<&str, f64> = BTreeMap::new();
    for (job, _, per) in requests {
        *expected_sums.entry(job).or_default() += per * ticks.len() as f64;
    }

    let dir = tempfile::tempdir().expect("a temp dir");
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, RULES).expect("the rule file");
    let port = pc::free_port();
    // No Alertmanager: a port nobody listens on (vmalert logs the failed
    // sends; the alert's state is what the test reads).
    let notifier = pc::free_port();
    let mut cmd = Command::new(vmalert_bin);
    cmd.arg(format!("-rule={}", rules.display()))
        .arg(format!("-datasource.url={}", receiver.read_base))
        .arg(format!("-remoteWrite.url={}", receiver.write_base))
        .arg("-remoteWrite.flushInterval=1s")
        .arg(format!("-notifier.url=http://127.0.0.1:{notifier}"))
        .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
        .arg("-evaluationInterval=1s");
    let mut vmalert = Process::spawn("vmalert", cmd, &dir.path().join("vmalert.log"));
    vmalert.wait_ready(
        &format!("http://127.0.0.1:{port}/health"),
        Duration::from_secs(30),
    );
    let context = || format!("vmalert log:\n{}", vmalert.log_tail());

    // The alert fires, in vmalert's own view.
    eventually("vmalert's alert firing", DELIVERY, &context, || {
        let (status, json) = pc::get_json(
            &agent,
            &format!("http://127.0.0.1:{port}/api/v1/alerts"),
            &[],
        );
        let alerts = json["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let firing: Vec<&serde_json::Value> = alerts
            .iter()
            .filter(|a| a["state"] == "firing" && a["labels"]["host"] == "q1")
            .collect();
        let q2 = alerts.iter().any(|a| a["labels"]["host"] == "q2");
        if status == 200 && firing.len() == 1 && !q2 {
            Ok(())
        } else {
            Err(format!("/api/v1/alerts: {status} {json}"))
        }
    });
    // The recorded series and the alert's state written into rtsdb.
    eventually(
        "the rules' series in the receiver",
        DELIVERY,
        &context,
        || {
            let ours = receiver.api();
            let t = pc::now_ms();
            let recorded = instant(&agent, &ours, "job:test_requests:sum", t);
            let Answer::Vector(v) = &recorded else {
                return Err(format!("job:test_requests:sum: {recorded:?}"));
            };
            let got: BTreeMap<String, f64> = v
                .iter()
                .filter_map(|(l, p)| l.get("job").map(|j| (j.clone(), p.v)))
                .collect();
            let want: BTreeMap<String, f64> = expected_sums
                .iter()
                .map(|(j, s)| (j.to_string(), *s))
                .collect();
            if got != want {
                return Err(format!("job:test_requests:sum: {got:?}, expected {want:?}"));
            }
            let alerts = instant(&agent, &ours, "ALERTS", t);
            if !vector_has(
                &alerts,
                &[
                    ("alertname", "TestQueueTooDeep"),
                    ("alertstate", "firing"),
                    ("host", "q1"),
                    ("severity", "page"),
                ],
            ) || vector_has(&alerts, &[("host", "q2")])
            {
                return Err(format!("ALERTS: {alerts:?}"));
            }
            Ok(())
        },
    );
}

on_both_backends!(prometheus_remote_write, vmagent_remote_write, vmalert_rules);

// The client tests with a second Prometheus as the receiver: what they
// expect of rtsdb is what the reference does.

#[test]
fn prometheus_remote_write_on_prometheus() {
    let test = "prom_clients::prometheus_remote_write_on_prometheus";
    on_prometheus(test, |r| scrape_and_write(test, r));
}

#[test]
fn vmagent_on_prometheus() {
    let test = "prom_clients::vmagent_on_prometheus";
    on_prometheus(test, |r| vmagent_scrape(test, r));
}

#[test]
fn vmalert_on_prometheus() {
    let test = "prom_clients::vmalert_on_prometheus";
    on_prometheus(test, |r| vmalert_against(test, r));
}

#[test]
fn exposition_names() {
    let text = "# HELP a x\n# TYPE a counter\na_total{x=\"1\"} 3\nb 4\n\nc{} 1 1700000000000\n";
    let names: Vec<String> = exposed_names(text).into_iter().collect();
    assert_eq!(names, ["a_total", "b", "c"]);
}
