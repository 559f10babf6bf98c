//! `tsdb import` as users run it: round trip with `scan --import`, bad
//! lines, gzip, out-of-order timestamps, several files, a held store.

use crate::common;

use common::tsdb;
use std::io::Write as _;
use std::path::Path;

fn scan_import(dir: &Path) -> String {
    scan_metrics(dir, &["sys.a", "sys.b"])
}

fn scan_metrics(dir: &Path, metrics: &[&str]) -> String {
    let mut args = vec!["scan", "--import", "1356998400", "1357020000"];
    for m in metrics {
        args.extend(["sum", m]);
    }
    let r = tsdb(dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Lines for two metrics, three series, several hours, ints, floats and
/// millisecond timestamps, in first-seen order of their names.
fn sample() -> String {
    let mut s = String::new();
    for i in 0..400u64 {
        let t = 1356998400 + i * 37;
        s.push_str(&format!("sys.a {t} {i} host=web01 dc=lga\n"));
        s.push_str(&format!("sys.a {t} {}.5 host=web02 dc=lga\n", i % 17));
        s.push_str(&format!("sys.b {t}{:03} -{i} host=web01\n", i % 1000));
    }
    s
}

#[test]
fn import_then_scan_round_trips_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let input = tmp.path().join("in.txt");
    write(&input, &sample());
    let r = tsdb(&a, &["import", "--auto-metric", input.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("Processed file {} in ", input.display()))
            && first.contains(" ms, 1200 data points (")
            && first.ends_with(" points/s)"),
        "{first}"
    );
    assert!(
        r.stdout
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("Total: imported 1200 data points in ")
    );
    let dumped = scan_import(&a);
    assert_eq!(dumped.lines().count(), 1200);
    let again = tmp.path().join("dump.txt");
    write(&again, &dumped);
    let r = tsdb(&b, &["import", "--auto-metric", again.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(scan_import(&b), dumped);
    // The raw rows are identical too (same UIDs, same cells).
    let raw = |d: &Path| tsdb(d, &["scan", "1356998400", "1357020000", "sum", "sys.a"]).stdout;
    assert_eq!(raw(&a), raw(&b));
    // Queries see the imported series through the series index.
    let q = tsdb(&b, &["query", "1356998400", "1357020000", "sum", "sys.b"]);
    assert_eq!(q.code, 0, "{}", q.stderr);
    assert_eq!(q.stdout.lines().count(), 400);
}

#[test]
fn first_bad_line_stops_and_keeps_what_came_before() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("bad.txt");
    write(
        &input,
        "sys.a 1356998400 1 host=a\nsys.a 1356998401 2 host=a\r\nsys.a 1356998402 3 host=a\nsys.a 1356998403 x host=a\nsys.a 1356998404 5 host=a\n",
    );
    let r = tsdb(
        &tmp.path().join("db"),
        &["import", "--auto-metric", input.to_str().unwrap()],
    );
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "Exception caught while processing file {} line=sys.a 1356998403 x host=a\nline 4: invalid value: Invalid character 'x' in x\n",
            input.display()
        )
    );
    assert_eq!(
        scan_metrics(&tmp.path().join("db"), &["sys.a"])
            .lines()
            .count(),
        3
    );
    // Other bad lines: the put parser's and the series checks' messages.
    for (line, msg) in [
        (
            "sys.a 1356998400",
            "illegal argument: not enough arguments (need least 4, got 2)",
        ),
        (
            "sys.a 1356998400 1 host",
            "illegal argument: invalid tag: host",
        ),
        (
            "sys.a 1356998400 1",
            "illegal argument: not enough arguments (need least 4, got 3)",
        ),
        ("sys.a 0 1 host=a", "illegal argument: invalid timestamp: 0"),
        (
            "bad!metric 1356998400 1 host=a",
            "illegal argument: Invalid metric name (\"bad!metric\"): illegal character: !",
        ),
        (
            "",
            "illegal argument: not enough arguments (need least 4, got 1)",
        ),
    ] {
        write(&input, &format!("{line}\n"));
        let r = tsdb(
            &tmp.path().join("db2"),
            &["import", "--auto-metric", input.to_str().unwrap()],
        );
        assert_eq!(r.code, 1, "{line}");
        assert!(
            r.stderr.ends_with(&format!("line 1: {msg}\n")),
            "{line}: {}",
            r.stderr
        );
    }
    let r = tsdb(
        &tmp.path().join("db2"),
        &["import", "--auto-metric", "/nonexistent/file.txt"],
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("/nonexistent/file.txt"), "{}", r.stderr);
}

#[test]
fn gzip_and_several_files() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("one.txt");
    write(
        &plain,
        "sys.a 1356998400 1 host=a\nsys.a 1356998410 2 host=a\n",
    );
    let gz = tmp.path().join("two.txt.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(
        b"sys.a 1356998420 3 host=a\nsys.b 1356998420 4 host=b\nsys.b 1356998430 5 host=b\n",
    )
    .unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let db = tmp.path().join("db");
    let r = tsdb(
        &db,
        &[
            "import",
            "--auto-metric",
            plain.to_str().unwrap(),
            gz.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    assert!(lines[0].contains("one.txt in ") && lines[0].contains(", 2 data points"));
    assert!(lines[1].contains("two.txt.gz in ") && lines[1].contains(", 3 data points"));
    assert!(lines[2].starts_with("Total: imported 5 data points"));
    assert_eq!(
        scan_import(&db),
        "sys.a 1356998400 1 host=a\nsys.a 1356998410 2 host=a\nsys.a 1356998420 3 host=a\nsys.b 1356998420 4 host=b\nsys.b 1356998430 5 host=b\n"
    );
}

#[test]
fn out_of_order_timestamps_need_the_bulk_switch() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("ooo.txt");
    // Another series in between does not matter; the order is per series.
    write(
        &input,
        "sys.a 1356998410 1 host=a\nsys.a 1356998400 9 host=b\nsys.a 1356998405 2 host=a\n",
    );
    let r = tsdb(
        &tmp.path().join("db"),
        &["import", "--auto-metric", input.to_str().unwrap()],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.ends_with("line 3: illegal argument: New timestamp=1356998405 is less than or equal to previous=1356998410000 when trying to add value=[2] to sys.a{host=a}\n"),
        "{}",
        r.stderr
    );
    assert_eq!(
        scan_metrics(&tmp.path().join("db"), &["sys.a"])
            .lines()
            .count(),
        2
    );
    let conf = tmp.path().join("opentsdb.conf");
    write(
        &conf,
        "tsd.core.bulk.allow_out_of_order_timestamps = true\n",
    );
    let db = tmp.path().join("db2");
    let r = tsdb(
        &db,
        &[
            "--config",
            conf.to_str().unwrap(),
            "import",
            "--auto-metric",
            input.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        scan_metrics(&db, &["sys.a"]),
        "sys.a 1356998405 2 host=a\nsys.a 1356998410 1 host=a\nsys.a 1356998400 9 host=b\n"
    );
}

#[test]
fn a_store_held_by_a_running_tsd_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let held = rtsdb::store::Store::open(&db, &Default::default()).unwrap();
    let input = tmp.path().join("in.txt");
    write(&input, "sys.a 1356998400 1 host=a\n");
    let r = tsdb(&db, &["import", "--auto-metric", input.to_str().unwrap()]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("is in use by another process"),
        "{}",
        r.stderr
    );
    drop(held);
}

#[test]
fn bad_line_deep_in_a_big_file_is_found_in_order() {
    // Several parse chunks (about 1 MiB each) handled by worker threads:
    // the line number and the points kept must still follow file order.
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("big.txt");
    let mut text = String::new();
    for i in 0..60_000u64 {
        if i == 50_000 {
            text.push_str("sys.a 1356998400 oops host=padding_padding_padding_padding\n");
        }
        text.push_str(&format!(
            "sys.a {} {i} host=padding_padding_padding_padding\n",
            1356998400 + i / 4 * 4 + i % 4
        ));
    }
    write(&input, &text);
    let db = tmp.path().join("db");
    let r = tsdb(&db, &["import", "--auto-metric", input.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .ends_with("line 50001: invalid value: Invalid character 'o' in oops\n"),
        "{}",
        r.stderr
    );
    let q = tsdb(
        &db,
        &[
            "scan",
            "--import",
            "1356998400",
            "1357100000",
            "sum",
            "sys.a",
        ],
    );
    assert_eq!(q.stdout.lines().count(), 50_000);
}

/// Without `--auto-metric` (and `tsd.core.auto_create_metrics`) an unknown
/// metric is a bad line, as in OpenTSDB's TextImporter; known metrics
/// import, and new tag names and values are still created.
#[test]
fn unknown_metrics_need_auto_metric() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let input = tmp.path().join("in.txt");
    write(&input, "sys.a 1356998400 1 host=a\n");
    let r = tsdb(&db, &["import", input.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("No such name for 'metrics': 'sys.a'"),
        "{}",
        r.stderr
    );
    let r = tsdb(&db, &["mkmetric", "sys.a"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = tsdb(&db, &["import", input.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(tsdb(&db, &["uid", "tagv", "a"]).code, 0);
}

/// `--skip-errors` reports each bad line with TextImporter's two log lines
/// and imports the rest.
#[test]
fn skip_errors_reports_bad_lines_and_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let input = tmp.path().join("in.txt");
    write(
        &input,
        "sys.a 1356998400 1 host=a\n\
         sys.a 1356998401 oops host=a\n\
         sys.a 1356998402 2 host=a\n\
         sys.a 1356998401 3 host=a\n\
         sys.a 1356998403 4 host=a\n",
    );
    let r = tsdb(
        &db,
        &[
            "import",
            "--auto-metric",
            "--skip-errors",
            input.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let path = input.display();
    assert!(
        r.stderr.contains(&format!(
            "Exception: invalid value: Invalid character 'o' in oops\nerror while processing file {path} line=sys.a 1356998401 oops host=a... Continuing\n"
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "error while processing file {path} line=sys.a 1356998401 3 host=a... Continuing\n"
        )),
        "{}",
        r.stderr
    );
    let q = tsdb(&db, &["scan", "--import", "1356998400", "sum", "sys.a"]);
    assert_eq!(
        q.stdout,
        "sys.a 1356998400 1 host=a\nsys.a 1356998402 2 host=a\nsys.a 1356998403 4 host=a\n"
    );
}
