//! `/q` (OpenTSDB's graph endpoint) and the legacy pages around it: the
//! page at `/`, `/s/`, `/favicon.ico`, `/logs`, the HTML 404 page and
//! `tsd.core.enable_ui`.

use crate::common;

use common::{HttpResponse, TestServer, http, telnet};

const H: u64 = 1356998400; // 2013-01-01T00:00:00Z, an hour boundary

fn get(srv: &TestServer, path: &str) -> HttpResponse {
    http(srv.addr, "GET", path, &[], b"")
}

/// A server with two series: web01 rising 0..=10 (integers), web02 at
/// 0.5 (floats), one point a minute over ten minutes.
fn server_with_data(settings: &[(&str, &str)]) -> TestServer {
    let mut all = vec![("tsd.core.auto_create_metrics", "true")];
    all.extend_from_slice(settings);
    let srv = TestServer::start(&all);
    let mut lines = String::new();
    for i in 0..=10u64 {
        lines.push_str(&format!(
            "put sys.cpu.user {} {i} host=web01 dc=lga\n",
            H + i * 60
        ));
        lines.push_str(&format!(
            "put sys.cpu.user {} 0.5 host=web02 dc=lga\n",
            H + i * 60
        ));
    }
    assert_eq!(telnet(srv.addr, lines.as_bytes()), "");
    srv
}

const RANGE: &str = "start=2013/01/01-00:00:00&end=2013/01/01-00:10:00";

#[test]
fn ascii_lines_are_put_lines() {
    let srv = server_with_data(&[]);
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&ascii"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert!(r.header("cache-control").unwrap().starts_with("max-age="));
    let mut want = String::new();
    // Tags as a HashMap of two iterates them: host, then dc.
    for i in 0..=10u64 {
        want.push_str(&format!(
            "sys.cpu.user {} {i} host=web01 dc=lga\n",
            H + i * 60
        ));
    }
    for i in 0..=10u64 {
        want.push_str(&format!(
            "sys.cpu.user {} 0.5 host=web02 dc=lga\n",
            H + i * 60
        ));
    }
    assert_eq!(r.text(), want);
    // Aggregated across hosts: one series, sums as doubles.
    let r = get(&srv, &format!("/q?{RANGE}&m=sum:sys.cpu.user&ascii"));
    let lines: Vec<String> = r.text().lines().map(String::from).collect();
    assert_eq!(lines.len(), 11);
    assert_eq!(lines[0], format!("sys.cpu.user {H} 0.5 dc=lga"));
    assert_eq!(lines[10], format!("sys.cpu.user {} 10.5 dc=lga", H + 600));
}

#[test]
fn json_is_graph_handlers_summary() {
    let srv = server_with_data(&[]);
    let r = get(
        &srv,
        &format!(
            "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&m=avg:sys.cpu.user&m=sum:sys.cpu.user%7Bhost=nope*%7D&json"
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let text = r.text();
    // HashMap order: plotted, timing, etags, points.
    let re = regex::Regex::new(
        r#"^\{"plotted":33,"timing":[0-9]+,"etags":\[\[\],\["host"\],null\],"points":44\}$"#,
    )
    .unwrap();
    assert!(re.is_match(&text), "{text}");
    // No data at all: nothing plotted, the first etags is [].
    let r = get(
        &srv,
        "/q?start=2014/01/01-00:00:00&end=2014/01/01-01:00:00&m=sum:sys.cpu.user&json",
    );
    let re = regex::Regex::new(r#"^\{"plotted":0,"timing":[0-9]+,"etags":\[\[\]\],"points":0\}$"#)
        .unwrap();
    assert!(re.is_match(&r.text()), "{}", r.text());
}

/// Decodes a PNG into (width, height, RGB rows).
fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes.to_vec()));
    dec.set_transformations(png::Transformations::EXPAND);
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn png_has_the_requested_size_and_shows_the_rising_line() {
    let srv = server_with_data(&[]);
    let r = get(
        &srv,
        &format!(
            "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=web01%7D&png&wxh=600x400&title=CPU&ylabel=percent"
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("image/png"));
    let (w, h, px) = decode(&r.body);
    assert_eq!((w, h), (600, 400));
    // The first colour is red (its edges blended into the background):
    // find it column by column.
    let red_rows: Vec<(u32, u32)> = (0..w)
        .filter_map(|x| {
            (0..h)
                .filter(|&y| {
                    let i = ((y * w + x) * 3) as usize;
                    px[i] > 180 && px[i + 1] < 110 && px[i + 2] < 110
                })
                .max()
                .map(|y| (x, y))
        })
        .collect();
    assert!(
        red_rows.len() > 300,
        "the line spans the width: {}",
        red_rows.len()
    );
    // web01 rises: its line is lower (larger y) on the left than on the right.
    let (left, right) = (red_rows[10], red_rows[red_rows.len() - 10]);
    assert!(left.1 > right.1 + 200, "left {left:?} right {right:?}");
    // The line is straight (one point a minute, one step each): the
    // middle column lies midway.
    let mid = red_rows[red_rows.len() / 2];
    let expected = (left.1 + right.1) / 2;
    assert!(
        mid.1.abs_diff(expected) < 25,
        "mid {mid:?} expected {expected}"
    );

    // Default size; a series on nothing draws "No data".
    let r = get(
        &srv,
        "/q?start=2014/01/01-00:00:00&end=2014/01/01-01:00:00&m=sum:sys.cpu.user&png",
    );
    let (w, h, _) = decode(&r.body);
    assert_eq!((w, h), (1024, 768));
    // Every option at once still draws.
    let r = get(
        &srv,
        &format!(
            "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&png&wxh=300x200&yrange=%5B0:20%5D&ylog&key=top%20left&nokey&bgcolor=x000000&fgcolor=xFFFFFF&smooth=csplines&style=points"
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(decode(&r.body).0, 300);
}

#[test]
fn second_axis_follows_allowed_options() {
    let srv = server_with_data(&[("tsd.gnuplot.options.allowlist", "axis x1y2;axis x1y1")]);
    let q = format!(
        "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=web01%7D&m=sum:sys.cpu.user%7Bhost=web02%7D&wxh=400x300&y2label=right"
    );
    let r = get(&srv, &format!("{q}&o=axis%20x1y1&o=axis%20x1y2&png"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(decode(&r.body).0, 400);
    let r = get(&srv, &format!("{q}&o=axis%20x1y1&png&json"));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.text(),
        r#"{"err":"1 `o' parameters, but 2 `m' parameters."}"#
    );
    let r = get(&srv, &format!("{q}&o=with%20lines&o=axis%20x1y1&json"));
    assert_eq!(
        r.text(),
        r#"{"err":"Query option at index 0 was not in the allow list."}"#
    );
}

#[test]
fn results_are_cached_by_query_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let cachedir = dir.path().join("cache");
    let srv = server_with_data(&[("tsd.http.cachedir", cachedir.to_str().unwrap())]);
    let q = format!("/q?{RANGE}&m=sum:sys.cpu.user");
    let first = get(&srv, &format!("{q}&json")).text();
    assert!(!first.contains("cachehit"), "{first}");
    // The range ended long ago: the result is reused, the answer says so.
    let again = get(&srv, &format!("{q}&json")).text();
    assert!(again.contains(r#""cachehit":"disk""#), "{again}");
    assert!(again.contains(r#""plotted":11"#), "{again}");
    // The PNG the JSON request drew is served from the cache, a day long.
    let png = get(&srv, &format!("{q}&png"));
    assert_eq!(png.header("cache-control"), Some("max-age=86400"));
    assert!(
        cachedir.read_dir().unwrap().count() >= 2,
        "files in tsd.http.cachedir"
    );
    // New data is not seen until nocache.
    assert_eq!(
        telnet(
            srv.addr,
            format!("put sys.cpu.user {} 100 host=web03 dc=lga\n", H + 30).as_bytes()
        ),
        ""
    );
    // 2.4.1 reads a summary without the text file as "nothing to show".
    let r = get(&srv, &format!("{q}&ascii")).text();
    assert!(
        r.contains("Sorry, your query didn't return anything."),
        "{r}"
    );
    let fresh = get(&srv, &format!("{q}&ascii&nocache")).text();
    // web03's 100 plus the others interpolated at that time.
    assert!(
        fresh.contains(&format!("sys.cpu.user {} 101.0 dc=lga", H + 30)),
        "{fresh}"
    );
    // `nocache` is part of the key (as in GraphHandler): that answer is
    // kept for the same request only.
    assert_eq!(get(&srv, &format!("{q}&nocache&ascii")).text(), fresh);

    // In memory without a cachedir. A range up to now may be reused for
    // ~0.1% of its span: 3 s for an hour.
    let srv = server_with_data(&[]);
    let q = "/q?start=1h-ago&m=sum:sys.cpu.user";
    assert_eq!(
        get(&srv, &format!("{q}&png")).header("cache-control"),
        Some("max-age=3")
    );
    let q = format!("/q?{RANGE}&m=sum:sys.cpu.user&json");
    get(&srv, &q);
    assert!(get(&srv, &q).text().contains("cachehit"));
}

#[test]
fn errors_as_graph_handler_words_them() {
    let srv = server_with_data(&[]);
    let cases = [
        (
            "/q?m=sum:sys.cpu.user&json",
            400,
            r#"{"err":"Missing parameter <code>start</code>"}"#,
        ),
        (
            "/q?start=1h-ago&m=sum:sys.cpu.user&wxh=10x10&json",
            400,
            r#"{"err":"Parameter wxh too short: 10x10"}"#,
        ),
        (
            "/q?start=1h-ago&m=sum:sys.cpu.user&yrange=5&json",
            400,
            r#"{"err":"'yrange' was invalid. Must be in the format [min:max]."}"#,
        ),
        (
            "/q?start=1h-ago&json",
            400,
            r#"{"err":"Missing sub queries"}"#,
        ),
        (
            "/q?start=1h-ago&m=foo:sys.cpu.user&json",
            400,
            r#"{"err":"No such aggregation function: foo"}"#,
        ),
        (
            "/q?start=1h-ago&m=sum:no.such.metric&json",
            500,
            r#"{"err":"net.opentsdb.uid.NoSuchUniqueName: No such name for 'metrics': 'no.such.metric'"}"#,
        ),
    ];
    for (path, status, body) in cases {
        let r = get(&srv, path);
        assert_eq!((r.status, r.text().as_str()), (status, body), "{path}");
    }
    // Without `json`, the page.
    let r = get(&srv, "/q?m=sum:sys.cpu.user&png");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("text/html; charset=UTF-8"));
    assert!(r.text().contains("<title>Bad Request</title>"));
    assert!(r.text().contains(
        "The reason provided was:<blockquote>Missing parameter <code>start</code></blockquote>"
    ));
    // Markup quoted from the request is escaped on the page.
    let r = get(&srv, "/q?start=1h-ago&m=%3Cscript%3E:sys.cpu.user&png");
    assert!(
        r.text()
            .contains("No such aggregation function: &lt;script&gt;"),
        "{}",
        r.text()
    );
    // No output flag: to the page, the query in the fragment.
    let r = get(&srv, "/q?start=1h-ago&m=sum:sys.cpu.user");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("location"),
        Some("/#start=1h-ago&m=sum:sys.cpu.user")
    );
    assert!(r.text().contains("url=/#start=1h-ago&m=sum:sys.cpu.user"));
}

#[test]
fn smoothing_gnuplot_cannot_do_on_two_columns_is_its_error() {
    let srv = server_with_data(&[]);
    // `zsort` sorts by a third column; OpenTSDB writes two, gnuplot stops.
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&smooth=zsort&json"),
    );
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            400,
            r#"{"err":"<pre>Not enough columns for this style</pre>"}"#
        )
    );
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&smooth=zsort&png"),
    );
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("<blockquote><pre>Not enough columns for this style</pre></blockquote>"),
        "{}",
        r.text()
    );
    // No gnuplot for `&ascii`: the points as they are.
    let r = get(
        &srv,
        &format!("/q?{RANGE}&m=sum:sys.cpu.user&smooth=zsort&ascii"),
    );
    assert_eq!(r.status, 200);
    // The smoothings gnuplot does on two columns draw.
    for s in ["acsplines", "bins"] {
        let r = get(
            &srv,
            &format!(
                "/q?{RANGE}&m=sum:sys.cpu.user%7Bhost=*%7D&smooth={s}&key=out%20bottom%20center&png"
            ),
        );
        assert_eq!(r.status, 200, "{s}");
        assert_eq!(r.header("content-type"), Some("image/png"), "{s}");
    }
}

#[test]
fn enable_ui_false_turns_the_page_and_q_off() {
    let srv = server_with_data(&[("tsd.core.enable_ui", "false")]);
    for path in [
        "/",
        "/q?start=1h-ago&m=sum:sys.cpu.user&ascii",
        "/s/app.js",
        "/logs",
    ] {
        assert_eq!(get(&srv, path).status, 404, "{path}");
    }
    assert_eq!(get(&srv, "/api/version").status, 200);
    // Write-only servers have no page either.
    let srv = TestServer::start(&[("tsd.mode", "wo")]);
    assert_eq!(get(&srv, "/").status, 404);
    assert_eq!(get(&srv, "/q?start=1h-ago&m=sum:x&ascii").status, 404);
}

#[test]
fn the_page_and_its_files() {
    let srv = TestServer::start(&[]);
    let r = get(&srv, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=UTF-8"));
    let page = r.text();
    assert!(page.contains("<title>"));
    for (file, ty) in [
        ("app.js", "text/javascript; charset=UTF-8"),
        ("app.css", "text/css; charset=UTF-8"),
        ("uPlot.iife.min.js", "text/javascript; charset=UTF-8"),
        ("uPlot.min.css", "text/css; charset=UTF-8"),
        ("uPlot.LICENSE", "text/plain; charset=UTF-8"),
    ] {
        assert!(
            file.ends_with("LICENSE") || page.contains(&format!("s/{file}")),
            "{file}"
        );
        let r = get(&srv, &format!("/s/{file}"));
        assert_eq!(r.status, 200, "{file}");
        assert_eq!(r.header("content-type"), Some(ty), "{file}");
        assert!(r.body.len() > 10, "{file}");
    }
    let r = get(&srv, "/favicon.ico");
    assert_eq!(r.header("content-type"), Some("image/x-icon"));
    assert_eq!(&r.body[..4], &[0, 0, 1, 0]);
    // Unknown files and traversal.
    assert_eq!(get(&srv, "/s/nothing.js").status, 404);
    let r = get(&srv, "/s/../etc/passwd");
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("Malformed URI <code>/s/../etc/passwd</code>")
    );
}

#[test]
fn static_root_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("static");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("opentsdb_header.jpg"), b"jpegbytes").unwrap();
    std::fs::write(root.join("style.css"), b"body{}").unwrap();
    std::fs::write(root.join("favicon.ico"), b"own icon").unwrap();
    std::fs::write(dir.path().join("secret.txt"), b"secret").unwrap();
    let srv = TestServer::start(&[("tsd.http.staticroot", root.to_str().unwrap())]);
    let r = get(&srv, "/s/style.css");
    assert_eq!((r.status, r.text().as_str()), (200, "body{}"));
    assert_eq!(r.header("content-type"), Some("text/css"));
    assert_eq!(r.header("cache-control"), Some("max-age=31536000"));
    let r = get(&srv, "/s/style.css?nocache");
    assert_eq!(r.header("cache-control"), Some("max-age=0"));
    assert_eq!(get(&srv, "/s/opentsdb_header.jpg").text(), "jpegbytes");
    assert_eq!(get(&srv, "/favicon.ico").text(), "own icon");
    assert_eq!(get(&srv, "/s/%2e%2e/secret.txt").status, 404);
    assert_eq!(get(&srv, "/s/..%2fsecret.txt").status, 400);
}

#[test]
fn unknown_pages_get_opentsdbs_404_page() {
    let srv = TestServer::start(&[]);
    let r = get(&srv, "/nothing/here");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("text/html; charset=UTF-8"));
    let page = r.text();
    assert!(page.starts_with("<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\"><title>Page Not Found</title>\n"), "{page}");
    assert!(page.contains("<font color=#507e9b><b>Error 404</b>"));
    assert!(page.contains("<blockquote><h1>Page Not Found</h1>The requested URL was not found on this server.</blockquote>"));
    assert!(page.ends_with("</table></body></html>"));
    assert_eq!(
        get(&srv, "/nothing?json").text(),
        r#"{"err":"Page Not Found"}"#
    );
}

#[test]
fn logs_show_recent_lines_and_change_the_level() {
    let _ = rtsdb::tsd::logs::install("warn", false);
    let srv = TestServer::start(&[]);
    tracing::warn!(target: "rtsdb_logs_test", "a line for /logs");
    let r = get(&srv, "/logs");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let line = r
        .text()
        .lines()
        .find(|l| l.contains("a line for /logs"))
        .map(String::from)
        .expect("the line is kept");
    let fields: Vec<&str> = line.split('\t').collect();
    assert_eq!(fields.len(), 5, "{line}");
    assert!(fields[0].parse::<u64>().is_ok());
    assert_eq!(fields[1], "WARN");
    assert_eq!(fields[3], "rtsdb_logs_test");
    let json = get(&srv, "/logs?json").json();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("a line for /logs"))
    );

    let r = get(&srv, "/logs?level=error&logger=rtsdb_logs_test");
    assert_eq!(r.text(), "Set the log level to ERROR on 1 logger.\n");
    tracing::warn!(target: "rtsdb_logs_test", "a line filtered out");
    assert!(!get(&srv, "/logs").text().contains("a line filtered out"));
    let r = get(&srv, "/logs?level=warn");
    assert!(
        r.text().starts_with("Set the log level to WARN on "),
        "{}",
        r.text()
    );
    tracing::warn!(target: "rtsdb_logs_test", "a line let through again");
    assert!(
        get(&srv, "/logs")
            .text()
            .contains("a line let through again")
    );
    // `json` is read first: it lists the lines whatever the level says.
    assert_eq!(get(&srv, "/logs?level=loud&json").status, 200);
    let r = get(&srv, "/logs?level=loud");
    assert_eq!(r.status, 400);
    assert!(
        r.text()
            .contains("<blockquote>Invalid level: loud</blockquote>")
    );
    let r = get(&srv, "/logs?level=info&logger=no.such.logger");
    assert!(
        r.text()
            .contains("<blockquote>Invalid logger: no.such.logger</blockquote>")
    );
}
