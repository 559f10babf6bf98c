//! `tsdb fsck` and `tsdb uid fsck` find injected faults, fix them, and
//! report a clean store as clean.

use crate::common;

use std::path::Path;

use rtsdb::codec::row::Cell;
use rtsdb::model::Tsuid;
use rtsdb::model::{NameRules, Timestamp, UidKind, Value};
use rtsdb::store::Durability;
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable, keys};

/// Exit code, and stdout followed by stderr.
fn tsdb(dir: &Path, args: &[&str]) -> (i32, String) {
    let r = common::tsdb(dir, args);
    (r.code, r.stdout + &r.stderr)
}

const BASE: u32 = 1_356_998_400;

/// A store with two series of one hour each; returns their row keys.
fn populate(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let t = UidTable::new(
        store.uid_store(),
        AutoCreate {
            metrics: true,
            ..Default::default()
        },
        NameRules::default(),
    );
    let m = t.get_or_create_id(UidKind::Metric, "sys.cpu.user").unwrap();
    let k = t.get_or_create_id(UidKind::TagKey, "host").unwrap();
    let mut keys = Vec::new();
    for host in ["web01", "web02"] {
        let v = t.get_or_create_id(UidKind::TagValue, host).unwrap();
        let tsuid = Tsuid::new(m, vec![(k, v)]).unwrap();
        let points: Vec<_> = (0..100)
            .map(|i| {
                (
                    Timestamp::Seconds(BASE + i * 10),
                    Value::Float(i as f64 / 4.0),
                )
            })
            .collect();
        store.put_points(&tsuid, &points, Durability::Sync).unwrap();
        keys.push(store.layout().row_key(&tsuid, BASE));
    }
    (keys[0].clone(), keys[1].clone())
}

fn line_value(text: &str, label: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no '{label}' in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn clean_store_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(line_value(&out, "Total Errors"), 0);
    assert_eq!(line_value(&out, "Rows Processed"), 2);
    assert_eq!(line_value(&out, "Valid Datapoints"), 200);
    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No errors found."), "{out}");
    // Compacting drops the engine's journal; everything stays readable.
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan", "--compact"]);
    assert_eq!(code, 0, "{out}");
    let journals = std::fs::read_dir(dir.path().join("fjall"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "jnl")
        })
        .count();
    assert_eq!(journals, 0);
    let (_, out) = tsdb(
        dir.path(),
        &["scan", "--import", "2013/01/01", "sum", "sys.cpu.user"],
    );
    assert_eq!(out.lines().count(), 200, "{out}");
    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_eq!(code, 0, "{out}");
    // Query form covers the same rows.
    let (code, out) = tsdb(dir.path(), &["fsck", "2013/01/01", "sum", "sys.cpu.user"]);
    assert_eq!((code, line_value(&out, "Rows Processed")), (0, 2), "{out}");
}

#[test]
fn duplicate_cells_and_bad_columns_are_found_and_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = populate(dir.path());
    {
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        // A second value for the point at BASE+10 (qualifier 00A0|flags).
        store
            .put_cells(
                &a,
                vec![Cell::new(vec![0x00, 0xA0], vec![99])],
                Durability::Sync,
            )
            .unwrap();
        // A compacted column whose value is one byte short.
        store
            .put_cells(
                &b,
                vec![Cell::new(vec![0x0F, 0xA0, 0x0F, 0xB0], vec![1])],
                Durability::Sync,
            )
            .unwrap();
    }
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(line_value(&out, "Duplicate Datapoints"), 1);
    assert_eq!(line_value(&out, "Unparseable Compacted Columns"), 1);
    assert!(
        out.contains("More than one column had a value for the same timestamp: (1356998410000)"),
        "{out}"
    );

    let (code, out) = tsdb(
        dir.path(),
        &[
            "fsck",
            "--full-scan",
            "--fix",
            "--resolve-duplicates",
            "--delete-bad-compacts",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(line_value(&out, "Duplicate Datapoints Resolved"), 1);
    assert_eq!(line_value(&out, "Unparseable Compacted Columns Deleted"), 1);
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!((code, line_value(&out, "Total Errors")), (0, 0), "{out}");
    // Last write wins by default: the injected value is the one kept.
    let (_, out) = tsdb(
        dir.path(),
        &[
            "scan",
            "--import",
            "1356998400",
            "sum",
            "sys.cpu.user",
            "host=web01",
        ],
    );
    assert!(
        out.contains("sys.cpu.user 1356998410 99 host=web01"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 100);
}

#[test]
fn corrupt_compressed_block_is_reported_with_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = populate(dir.path());
    {
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut row = store.get_row(&a).unwrap().unwrap();
        row.cells[0].value[5] ^= 0x40;
        store.write_row(&a, &row, Durability::Sync).unwrap();
    }
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!(code, 1);
    assert!(out.contains("Corrupted column in row 00000150E22700000001000001: compressed column checksum mismatch"), "{out}");
    let (_, out) = tsdb(
        dir.path(),
        &["scan", "1356998400", "sum", "sys.cpu.user", "host=web01"],
    );
    assert!(out.contains("checksum mismatch"), "{out}");
}

#[test]
fn orphans_in_data_and_uid_tables() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    {
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let t = UidTable::new(
            store.uid_store(),
            AutoCreate::default(),
            NameRules::default(),
        );
        // The data row of web02 loses its tag value.
        t.delete(UidKind::TagValue, "web02").unwrap();
        // A reverse mapping with no forward one, and a forward mapping
        // with no reverse one.
        store
            .edit_uid_cells(vec![
                (
                    keys::reverse(UidKind::TagValue, &[0, 0, 9]),
                    Some(b"ghost".to_vec()),
                ),
                (keys::forward(UidKind::TagKey, "dc"), Some(vec![0, 0, 2])),
            ])
            .unwrap();
    }
    let (code, out) = tsdb(dir.path(), &["fsck", "--full-scan"]);
    assert_eq!(code, 1);
    assert_eq!(line_value(&out, "Orphaned UID Rows"), 1);
    assert!(
        out.contains("No such unique ID for 'tagv': [0, 0, 2]"),
        "{out}"
    );
    let (code, out) = tsdb(
        dir.path(),
        &["fsck", "--full-scan", "--fix", "--delete-orphans"],
    );
    assert_eq!(
        (code, line_value(&out, "Orphaned UID Rows Deleted")),
        (0, 1),
        "{out}"
    );

    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("Reverse tagv mapping is missing forward mapping: ghost -> [0, 0, 9]"),
        "{out}"
    );
    assert!(
        out.contains("Forward tagk mapping is missing reverse mapping: dc -> [0, 0, 2]"),
        "{out}"
    );
    assert!(
        out.contains("We found an ID of 9 for tagv but the max ID is only 2!"),
        "{out}"
    );
    let (_, out) = tsdb(dir.path(), &["uid", "fsck", "fix"]);
    assert!(
        out.contains("FIX: Restoring tagk reverse mapping: [0, 0, 2] -> dc"),
        "{out}"
    );
    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No errors found."), "{out}");
}

/// The series Prometheus remote write brings, made through the lower
/// layers (UIDs under rules that take these names, points through the
/// store): a recording rule's name with `:` and no label, and a
/// Kubernetes-like series of 20 labels with any UTF-8 in their values
/// (`le="+Inf"`, `__meta_*`, spaces, quotes, `=`, `,`, braces, a
/// character outside the BMP) and a stale marker among its points.
/// Returns the two metric names.
fn populate_prometheus_shapes(dir: &Path) -> (&'static str, &'static str) {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let t = UidTable::new(
        store.uid_store(),
        AutoCreate {
            metrics: true,
            tagks: true,
            tagvs: true,
        },
        NameRules::with_special_chars(" :=\"+{},\u{1F600}"),
    );
    let (rule, kube) = ("job:http_requests:rate5m", "kube_pod_info");
    let bare = Tsuid::new(t.get_or_create_id(UidKind::Metric, rule).unwrap(), vec![]).unwrap();
    let mut labels: Vec<(String, String)> = vec![
        ("le".into(), "+Inf".into()),
        ("__meta_kubernetes_pod_name".into(), "web 1".into()),
        ("path".into(), "/a=b,c".into()),
        ("quote".into(), "say \"hi\" {x}".into()),
        ("face".into(), "\u{1F600}".into()),
    ];
    labels.extend((labels.len()..20).map(|i| (format!("label_{i}"), format!("v{i}"))));
    let pairs = labels
        .iter()
        .map(|(k, v)| {
            (
                t.get_or_create_id(UidKind::TagKey, k).unwrap(),
                t.get_or_create_id(UidKind::TagValue, v).unwrap(),
            )
        })
        .collect();
    let wide = Tsuid::new(t.get_or_create_id(UidKind::Metric, kube).unwrap(), pairs).unwrap();
    assert_eq!(wide.tags.len(), 20);
    let marker = Value::Float(f64::from_bits(rtsdb::model::point::STALE_MARKER_BITS));
    for tsuid in [&bare, &wide] {
        let points = [
            (
                Timestamp::Millis(BASE as u64 * 1000 + 250),
                Value::Float(0.5),
            ),
            (Timestamp::Millis(BASE as u64 * 1000 + 15_250), marker),
            (Timestamp::Seconds(BASE + 30), Value::Int(1)),
        ];
        store.put_points(tsuid, &points, Durability::Sync).unwrap();
    }
    (rule, kube)
}

/// `tsdb fsck` finds nothing wrong with series of no tag, of 20 tags and
/// of UTF-8 names, nor with a stale marker's 8-byte cell, before and
/// after compacting them; `tsdb scan` and `tsdb uid` show them.
#[test]
fn series_of_prometheus_shapes_are_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (rule, kube) = populate_prometheus_shapes(dir.path());
    for args in [
        &["fsck", "--full-scan"][..],
        &["fsck", "--full-scan", "--compact"],
        &["fsck", "--full-scan"],
    ] {
        let (code, out) = tsdb(dir.path(), args);
        assert_eq!(code, 0, "{args:?}: {out}");
        assert_eq!(line_value(&out, "Total Errors"), 0, "{args:?}: {out}");
        assert_eq!(line_value(&out, "Rows Processed"), 2, "{args:?}: {out}");
        assert_eq!(line_value(&out, "Valid Datapoints"), 6, "{args:?}: {out}");
    }
    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No errors found."), "{out}");
    // Rows as stored: the marker prints as the NaN it is.
    let (code, out) = tsdb(dir.path(), &["scan", "--import", "2013/01/01", "sum", rule]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out,
        "job:http_requests:rate5m 1356998400250 0.5\n\
         job:http_requests:rate5m 1356998415250 NaN\n\
         job:http_requests:rate5m 1356998430 1\n"
    );
    // Compacted, the marker keeps its 8 bytes.
    let (code, out) = tsdb(dir.path(), &["scan", "2013/01/01", "sum", rule]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("[127, -16, 0, 0, 0, 0, 0, 2]"), "{out}");
    let (code, out) = tsdb(dir.path(), &["scan", "--import", "2013/01/01", "sum", kube]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    for tag in ["le=+Inf", "path=/a=b,c", "face=\u{1F600}", "label_19=v19"] {
        assert!(out.contains(tag), "{tag}: {out}");
    }
    let (code, out) = tsdb(dir.path(), &["uid", "metrics", rule]);
    assert_eq!(
        (code, out.as_str()),
        (0, "metrics job:http_requests:rate5m: [0, 0, 1]\n")
    );
    let (code, out) = tsdb(dir.path(), &["uid", "grep", "tagv", "Inf"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("+Inf"), "{out}");
    // Their meta (TSMeta under the TSUID: the metric UID alone for the
    // tagless series) is built like any other's.
    let (code, out) = tsdb(dir.path(), &["uid", "metasync"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = tsdb(dir.path(), &["uid", "fsck"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No errors found."), "{out}");
}
