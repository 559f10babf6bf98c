//! The page at `/` in a real browser: headless Chromium (Debian's
//! `chromium`, or `RTSDB_CHROMIUM`) opens it against a TSD with known
//! data, and the DOM it leaves shows what the page drew. Without Chromium
//! these tests say they were skipped and pass.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{TestServer, telnet};

const H: u64 = 1356998400;

/// The browser, if one is installed.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RTSDB_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Runs Chromium on `url` and returns the DOM it ended with, or `None`
/// when there is no browser.
fn open_page(url: &str) -> Option<String> {
    let Some(bin) = chromium() else {
        eprintln!("skipped: no chromium (apt-get install chromium, or set RTSDB_CHROMIUM)");
        return None;
    };
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1280,1000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()));
    // Virtual time: the browser runs until its network and timers idle
    // (deterministic, however slow the machine).
    cmd.arg("--virtual-time-budget=20000");
    cmd.arg("--dump-dom");
    let mut child = cmd
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    // Bounded: a browser that hangs fails the test instead of the run.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The `data-*` attributes of the page's status line.
fn status(dom: &str) -> Vec<(String, String)> {
    let start = dom.find("id=\"summary\"").expect("status element");
    let tag_end = start + dom[start..].find('>').unwrap();
    let re = regex::Regex::new(r#"data-([a-z-]+)="([^"]*)""#).unwrap();
    re.captures_iter(&dom[start..tag_end])
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect()
}

fn attr<'a>(st: &'a [(String, String)], name: &str) -> &'a str {
    st.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// The text of the element with `id`, up to its closing tag.
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom.find(&format!("id=\"{id}\"")).expect(id);
    let rest = &dom[start..];
    &rest[..rest
        .find("</a>")
        .or(rest.find("</div>"))
        .unwrap_or(rest.len())]
}

/// Two series over an hour, a point a minute: `page.test{host=a}` rising
/// 0..=60, `page.test{host=b}` at 7.
fn server() -> TestServer {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let mut lines = String::new();
    for i in 0..=60u64 {
        lines.push_str(&format!("put page.test {} {i} host=a dc=lga\n", H + i * 60));
        lines.push_str(&format!("put page.test {} 7 host=b dc=lga\n", H + i * 60));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    srv
}

const RANGE: &str = "start=2013%2F01%2F01-00:00:00&end=2013%2F01%2F01-01:00:00&tz=UTC";

#[test]
fn page_charts_the_series_from_its_url() {
    let srv = server();
    // The table view: the chart is drawn too, the table only when shown.
    let url = format!(
        "http://{}/#{RANGE}&m=sum:page.test%7Bhost=*%7D&view=table",
        srv.addr
    );
    let Some(dom) = open_page(&url) else {
        return;
    };
    let st = status(&dom);
    assert_eq!(attr(&st, "state"), "done", "{dom}");
    assert_eq!(attr(&st, "series"), "2");
    assert_eq!(attr(&st, "points"), "122");
    // The chart: a canvas, and uPlot's legend names both series.
    assert!(dom.contains("<canvas"), "no chart drawn");
    assert!(dom.contains("page.test{dc=lga, host=a}"));
    assert!(dom.contains("page.test{dc=lga, host=b}"));
    // The same result as a table: points, first, last, min, max, avg.
    assert!(
        dom.contains("<td>page.test{dc=lga, host=a}</td><td>61</td><td>0</td><td>60</td><td>0</td><td>60</td><td>30</td>"),
        "{dom}"
    );
    assert!(dom.contains("<td>page.test{dc=lga, host=b}</td><td>61</td><td>7</td><td>7</td><td>7</td><td>7</td><td>7</td>"));
    // The controls were filled from the URL.
    assert!(
        dom.contains("\"metric\": \"page.test\""),
        "the /api/query shown"
    );
}

#[test]
fn series_browser_lists_the_metrics() {
    let srv = server();
    let url = format!("http://{}/#{RANGE}&m=sum:page.test&view=browse", srv.addr);
    let Some(dom) = open_page(&url) else {
        return;
    };
    let browse = element(&dom, "browse");
    assert!(browse.contains("1 metrics"), "{browse}");
    assert!(dom.contains(">page.test</a>"), "{dom}");
}

#[test]
fn cardinality_tab_shows_the_top_tables() {
    let srv = server();
    let url = format!(
        "http://{}/#{RANGE}&m=sum:page.test&view=cardinality",
        srv.addr
    );
    let Some(dom) = open_page(&url) else {
        return;
    };
    let total = element(&dom, "card-total");
    assert!(
        total.contains("2 series, 1 metrics, 3 tag pairs (tenant default"),
        "{total}"
    );
    assert!(
        dom.contains("<tr><td>page.test</td><td>2</td></tr>"),
        "{dom}"
    );
    assert!(dom.contains("<tr><td>host</td><td>2</td><td>2</td></tr>"));
    assert!(dom.contains("<tr><td>dc=lga</td><td>2</td></tr>"));
    assert!(dom.contains("<tr><td>host=a</td><td>1</td></tr>"));
    assert!(
        dom.contains("<td>page.test</td><td>2</td><td>"),
        "new series"
    );
}

#[test]
fn page_shows_server_errors_as_worded() {
    let srv = server();
    let url = format!("http://{}/#{RANGE}&m=sum:no.such.metric", srv.addr);
    let Some(dom) = open_page(&url) else {
        return;
    };
    assert_eq!(attr(&status(&dom), "state"), "error");
    let err = element(&dom, "error");
    assert!(
        err.contains("400: No such name for 'metrics': 'no.such.metric'"),
        "{err}"
    );
    let url = format!("http://{}/#{RANGE}&m=nosuchagg:page.test", srv.addr);
    let dom = open_page(&url).unwrap();
    assert!(element(&dom, "error").contains("No such aggregation function: nosuchagg"));
}

#[test]
fn page_url_round_trips() {
    let srv = server();
    // Every control: filters of both kinds, rate with counter options,
    // downsampling with fill, right axis, log scale, the table view.
    let hash = format!(
        "{RANGE}&m=sum:rate%7Bcounter,100,5%7D:1m-avg-zero:page.test%7Bhost=a%7Cb%7D%7Bdc=wildcard(l*)%7D&o=axis%20x1y2&ylog&view=table"
    );
    let url = format!("http://{}/#{hash}", srv.addr);
    let Some(first) = open_page(&url) else {
        return;
    };
    let q = element(&first, "q-url").to_string();
    let shown = q.rsplit('>').next().unwrap().to_string();
    assert!(shown.starts_with("q?"), "{q}");
    let canonical = shown
        .trim_start_matches("q?")
        .trim_end_matches("&amp;wxh=1024x600&amp;png")
        .replace("&amp;", "&");
    // Opening the page at the URL it wrote gives the same page.
    let again = open_page(&format!("http://{}/#{canonical}", srv.addr)).unwrap();
    assert_eq!(element(&again, "q-url"), q);
    for a in ["state", "series", "points"] {
        assert_eq!(attr(&status(&again), a), attr(&status(&first), a), "{a}");
    }
    for part in [
        "m=sum:rate{counter,100,5}:1m-avg-zero:page.test",
        "o=axis%20x1y2",
        "&ylog",
        "&view=table",
    ] {
        assert!(
            canonical.contains(part)
                || canonical.contains(&part.replace('{', "%7B").replace('}', "%7D")),
            "{part} in {canonical}"
        );
    }
    assert_eq!(attr(&status(&first), "state"), "done", "{first}");
    // A /q link (as /q's redirect sends it) opens the same query.
    let from_q = open_page(&format!(
        "http://{}/#{RANGE}&m=sum:page.test%7Bhost=*%7D&o=",
        srv.addr
    ))
    .unwrap();
    assert_eq!(attr(&status(&from_q), "series"), "2");
}

/// Chromium driven over its DevTools pipe (`--remote-debugging-pipe`:
/// JSON messages ending in NUL on fds 3 and 4), so the page runs in real
/// time and can be asked for its state when it is done.
struct Browser {
    child: std::process::Child,
    to: std::fs::File,
    from: std::io::BufReader<std::fs::File>,
    next_id: u64,
    session: Option<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Option<Browser> {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        let bin = chromium()?;
        let profile = tempfile::tempdir().unwrap();
        let (mut to_chrome, mut from_chrome) = ([0i32; 2], [0i32; 2]);
        unsafe {
            assert_eq!(libc::pipe(to_chrome.as_mut_ptr()), 0);
            assert_eq!(libc::pipe(from_chrome.as_mut_ptr()), 0);
        }
        let (chrome_reads, chrome_writes) = (to_chrome[0], from_chrome[1]);
        let mut cmd = Command::new(bin);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1280,1000",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(chrome_reads, 3) < 0 || libc::dup2(chrome_writes, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        unsafe {
            libc::close(chrome_reads);
            libc::close(chrome_writes);
        }
        Some(Browser {
            child,
            to: unsafe { std::fs::File::from_raw_fd(to_chrome[1]) },
            from: std::io::BufReader::new(unsafe { std::fs::File::from_raw_fd(from_chrome[0]) }),
            next_id: 0,
            session: None,
            _profile: profile,
        })
    }

    /// Sends a command and waits for its answer (events are skipped).
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::{BufRead, Write};
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = serde_json::Value::String(s.clone());
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut buf = Vec::new();
            assert!(
                self.from.read_until(0, &mut buf).unwrap() > 0,
                "chromium went away"
            );
            buf.pop();
            let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    fn open(&mut self, url: &str) {
        let target = self.call(
            "Target.createTarget",
            serde_json::json!({"url": "about:blank"}),
        );
        let attached = self.call(
            "Target.attachToTarget",
            serde_json::json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = attached["sessionId"].as_str().map(String::from);
        self.call("Page.navigate", serde_json::json!({"url": url}));
    }

    fn eval(&mut self, js: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo test --release --test it -- --ignored page_draws_1000_series
/// --nocapture`: how fast the page loads and draws 1,000 series of 360
/// points, in real time (printed; a figure, not a pass/fail time).
#[test]
#[ignore]
fn page_draws_1000_series() {
    let srv = TestServer::start(&[("tsd.core.auto_create_metrics", "true")]);
    let mut lines = String::with_capacity(40 << 20);
    for s in 0..1000u64 {
        for i in 0..360u64 {
            let v = (s as f64 * 0.37 + i as f64 / 20.0).sin() * 50.0 + 60.0;
            lines.push_str(&format!(
                "put bench.series {} {v:.2} host=h{s:04}\n",
                H + i * 10
            ));
        }
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    srv.state.db().flush_all().unwrap();
    let Some(mut browser) = Browser::start() else {
        eprintln!("skipped: no chromium");
        return;
    };
    let url = format!(
        "http://{}/#{RANGE}&m=sum:bench.series%7Bhost=*%7D",
        srv.addr
    );
    for round in 0..3 {
        browser.open(&url);
        let deadline = Instant::now() + Duration::from_secs(60);
        let st = loop {
            let st = browser.eval(
                "(function(){var d=document.getElementById('summary');return d&&d.dataset.drawnMs?JSON.stringify(d.dataset):null})()",
            );
            if let Some(s) = st.as_str() {
                break serde_json::from_str::<serde_json::Value>(s).unwrap();
            }
            assert!(Instant::now() < deadline, "the page did not finish");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(st["series"], "1000", "{st}");
        assert_eq!(st["points"], "360000", "{st}");
        println!(
            "round {round}: 1000 series x 360 points: query {} ms, build+draw {} ms, painted {} ms after navigation",
            st["fetchMs"].as_str().unwrap_or("?"),
            st["renderMs"].as_str().unwrap_or("?"),
            st["drawnMs"].as_str().unwrap_or("?")
        );
    }
}
