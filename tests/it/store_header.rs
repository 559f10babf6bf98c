//! The store header is checked on every open: an edited value is refused
//! by its checksum, a header (even one without a checksum, as version 1
//! wrote) that contradicts the UID table is refused naming both widths, a
//! newer format is refused naming both versions, and a version 1 header is
//! upgraded in place.

use std::path::Path;

use crate::common::{tsd_refuses, tsdb};

const HEADER: &str = "rtsdb-store.json";

/// A store with a few points under 3-byte UIDs (the default).
fn store_with_points(dir: &Path) {
    let points = dir.join("points.txt");
    std::fs::write(
        &points,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 43 host=web02\n",
    )
    .unwrap();
    let r = tsdb(
        &dir.join("store"),
        &["import", "--auto-metric", points.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

fn header(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("store").join(HEADER)).unwrap()).unwrap()
}

fn write_header(dir: &Path, h: &serde_json::Value) {
    std::fs::write(
        dir.join("store").join(HEADER),
        serde_json::to_string_pretty(h).unwrap(),
    )
    .unwrap();
}

fn scan(dir: &Path) -> crate::common::Run {
    tsdb(
        &dir.join("store"),
        &["scan", "--import", "1356998400", "sum", "sys.cpu.user"],
    )
}

#[test]
fn a_new_header_carries_a_checksum_and_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    store_with_points(dir.path());
    let h = header(dir.path());
    assert_eq!(h["format_version"], 9);
    assert!(h["checksum"].as_str().unwrap().starts_with("crc32:"), "{h}");
    assert_eq!(scan(dir.path()).code, 0);
}

#[test]
fn an_edited_width_is_refused_by_the_checksum() {
    let dir = tempfile::tempdir().unwrap();
    store_with_points(dir.path());
    let mut h = header(dir.path());
    h["uid_width"]["metric"] = 4.into();
    write_header(dir.path(), &h);
    let r = scan(dir.path());
    assert_ne!(r.code, 0, "an edited header was accepted: {}", r.stdout);
    assert!(
        r.stderr.contains("does not match its content"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(HEADER), "names the file: {}", r.stderr);
    // Put back as it was, it opens again: nothing was written meanwhile.
    h["uid_width"]["metric"] = 3.into();
    write_header(dir.path(), &h);
    let r = scan(dir.path());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        "sys.cpu.user 1356998400 42 host=web01\nsys.cpu.user 1356998460 43 host=web02\n"
    );
}

/// A version 1 header has no checksum: an edited width there is caught by
/// the UID table, and the TSD refuses to start, naming both widths.
#[test]
fn a_header_contradicting_the_uid_table_is_refused_naming_both_widths() {
    let dir = tempfile::tempdir().unwrap();
    store_with_points(dir.path());
    let mut h = header(dir.path());
    h.as_object_mut().unwrap().remove("checksum");
    h["format_version"] = 1.into();
    h["uid_width"]["metric"] = 4.into();
    write_header(dir.path(), &h);
    let stderr = tsd_refuses(&dir.path().join("store"));
    assert!(
        stderr
            .contains("its metrics UIDs are 4 bytes, but the UID table holds 3-byte metrics UIDs"),
        "{stderr}"
    );
    // Nothing was upgraded or written on the way out.
    assert_eq!(header(dir.path())["format_version"], 1);
    assert_eq!(header(dir.path())["uid_width"]["metric"], 4);
    // A counter past what the header's width holds is caught too: put
    // the true width back, assign 300 more tag values, then claim 1 byte.
    h["uid_width"]["metric"] = 3.into();
    write_header(dir.path(), &h);
    let big: String = (0..300)
        .map(|i| format!("m.big 1356998400 {i} host=h{i}\n"))
        .collect();
    let f = dir.path().join("big.txt");
    std::fs::write(&f, big).unwrap();
    let r = tsdb(
        &dir.path().join("store"),
        &["import", "--auto-metric", f.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut h = header(dir.path());
    h.as_object_mut().unwrap().remove("checksum");
    h["format_version"] = 1.into();
    h["uid_width"]["tagv"] = 1.into();
    write_header(dir.path(), &h);
    let r = scan(dir.path());
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains(
            "its tagv UIDs are 1 bytes, but the UID table has assigned tagv UIDs up to 302"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn a_newer_format_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    store_with_points(dir.path());
    let mut h = header(dir.path());
    h["format_version"] = 10.into();
    h["a_field_from_the_future"] = "x".into();
    write_header(dir.path(), &h);
    let r = scan(dir.path());
    assert_ne!(r.code, 0);
    assert!(
        r.stderr
            .contains("has format version 10, newer than this build")
            && r.stderr.contains("this build reads versions 1 to 9"),
        "{}",
        r.stderr
    );
}
