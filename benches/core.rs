//! Storage-core benchmarks: UID lookups and assignment, row keys, and the
//! column codecs. `cargo bench --bench core`; criterion prints rates
//! (elements/s) because every group sets its throughput.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rtsdb::codec::column;
use rtsdb::codec::compressed;
use rtsdb::codec::qualifier::StoredPoint;
use rtsdb::codec::row::{self, DuplicatePolicy, RowCells};
use rtsdb::codec::row_key::KeyLayout;
use rtsdb::model::Tsuid;
use rtsdb::model::{NameRules, Timestamp, UidKind, Value};
use rtsdb::store::{Store, StoreOptions};
use rtsdb::uid::{AutoCreate, UidTable};

const BASE: u32 = 1_356_998_400;

fn uid_benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
    let table = UidTable::new(
        store.uid_store(),
        AutoCreate::default(),
        NameRules::default(),
    );
    let names: Vec<String> = (0..10_000)
        .map(|i| format!("host{i:05}.example.com"))
        .collect();
    for n in &names {
        table.assign(UidKind::TagValue, n).unwrap();
    }
    let mut g = c.benchmark_group("uid");
    g.throughput(Throughput::Elements(names.len() as u64));
    g.bench_function("lookup_cached_10k", |b| {
        b.iter(|| {
            for n in &names {
                black_box(table.get_id(UidKind::TagValue, n).unwrap());
            }
        })
    });
    let ids: Vec<_> = names
        .iter()
        .map(|n| table.get_id(UidKind::TagValue, n).unwrap())
        .collect();
    g.bench_function("reverse_cached_10k", |b| {
        b.iter(|| {
            for id in &ids {
                black_box(table.get_name(UidKind::TagValue, *id).unwrap());
            }
        })
    });
    g.throughput(Throughput::Elements(1_000));
    let mut round = 0u64;
    g.bench_function("assign_new_1k", |b| {
        b.iter_batched(
            || {
                round += 1;
                (0..1_000)
                    .map(|i| format!("r{round}.metric.{i}"))
                    .collect::<Vec<_>>()
            },
            |batch| {
                for n in &batch {
                    black_box(table.assign(UidKind::Metric, n).unwrap());
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn hour_of_points() -> Vec<StoredPoint> {
    // A gauge every 10 s with one decimal, wandering: typical devops data.
    let mut v = 500i64;
    (0..360)
        .map(|i| {
            v += (i * 7919 % 11) as i64 - 5;
            StoredPoint::new(
                Timestamp::Seconds(BASE + i * 10),
                BASE,
                Value::Float(v as f64 / 10.0),
            )
            .unwrap()
            .0
        })
        .collect()
}

fn codec_benches(c: &mut Criterion) {
    let layout = KeyLayout::default();
    let tsuid =
        Tsuid::parse_hex("000001000001000002000002000003000003000004", &layout.widths).unwrap();
    let points = hour_of_points();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    g.bench_function("row_key_build", |b| {
        b.iter(|| black_box(layout.row_key(black_box(&tsuid), BASE)))
    });
    let key = layout.row_key(&tsuid, BASE);
    g.bench_function("row_key_parse", |b| {
        b.iter(|| black_box(layout.parse_row_key(black_box(&key)).unwrap()))
    });

    g.throughput(Throughput::Elements(points.len() as u64));
    g.bench_function("compacted_encode_360", |b| {
        b.iter(|| black_box(column::encode_compacted(black_box(&points))))
    });
    let (q, v) = column::encode_compacted(&points);
    g.bench_function("compacted_decode_360", |b| {
        let mut out = Vec::with_capacity(360);
        b.iter(|| {
            out.clear();
            column::decode_compacted(black_box(&q), black_box(&v), &mut out).unwrap();
            black_box(&out);
        })
    });
    g.bench_function("compressed_encode_360", |b| {
        b.iter(|| black_box(compressed::encode(black_box(&points))))
    });
    let block = compressed::encode(&points);
    g.bench_function("compressed_decode_360", |b| {
        let mut out = Vec::with_capacity(360);
        b.iter(|| {
            out.clear();
            compressed::decode(black_box(&block), &mut out).unwrap();
            black_box(&out);
        })
    });
    let compressed_cells = RowCells {
        cells: vec![row::Cell::new(
            compressed::COMPRESSED_QUALIFIER.to_vec(),
            block.clone(),
        )],
    };
    let compressed_encoded = compressed_cells.encode();
    g.bench_function("row_decode_compressed_360", |b| {
        b.iter(|| {
            let cells = RowCells::decode(black_box(&compressed_encoded)).unwrap();
            black_box(row::decode_row(&key, &cells, DuplicatePolicy::LastWriteWins).unwrap())
        })
    });
    let cells = RowCells {
        cells: vec![row::Cell::new(q.clone(), v.clone())],
    };
    let encoded = cells.encode();
    g.bench_function("row_decode_classic_360", |b| {
        b.iter(|| {
            let cells = RowCells::decode(black_box(&encoded)).unwrap();
            black_box(row::decode_row(&key, &cells, DuplicatePolicy::LastWriteWins).unwrap())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    targets = uid_benches, codec_benches
}
criterion_main!(benches);
