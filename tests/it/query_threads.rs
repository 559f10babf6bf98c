//! A query over many series reads them on several threads (one run of
//! series each, `SeriesSource::read_threads`): its answer must be the one
//! a single thread gives, byte for byte, whatever the mix of stored rows,
//! buffered points, late points, groups, rates and limits.

use rtsdb::model::{Tsuid, Uid, Value};
use rtsdb::query::{self, QueryContext, QueryLimits};
use rtsdb::store;
use rtsdb::store::read::{PointSink, ReadStats, SeriesData, SeriesSource};

use super::common::db::{Db, T};

/// The test database's reads, offered to a query on `threads` threads.
struct Threads<'a> {
    db: &'a rtsdb::db::Db,
    threads: usize,
}

impl SeriesSource for Threads<'_> {
    fn read_tsuids(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> store::Result<ReadStats> {
        self.db.read_tsuids(tsuids, start_ms, end_ms, sink)
    }

    fn scan_tsuids(
        &self,
        metric: Uid,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
        sink: &mut PointSink<'_>,
    ) -> store::Result<ReadStats> {
        self.db.scan_tsuids(metric, tsuids, start_ms, end_ms, sink)
    }

    fn read_threads(&self) -> usize {
        self.threads
    }

    fn read_series(
        &self,
        metric: Uid,
        start_ms: u64,
        end_ms: u64,
        want: &mut dyn FnMut(&Tsuid) -> bool,
    ) -> store::Result<Vec<SeriesData>> {
        self.db.read_series(metric, start_ms, end_ms, want)
    }

    fn read_histograms(
        &self,
        tsuids: &[Tsuid],
        start_ms: u64,
        end_ms: u64,
    ) -> store::Result<rtsdb::store::histograms::HistogramRead> {
        self.db.read_histograms(tsuids, start_ms, end_ms)
    }
}

fn run(db: &Db, threads: usize, limits: QueryLimits, qs: &str) -> Result<String, String> {
    let source = Threads {
        db: &db.db,
        threads,
    };
    let mut ctx = QueryContext::new(&db.db, &Default::default());
    ctx.source = &source;
    ctx.now_ms = (T + 86_400) * 1000;
    ctx.limits = limits;
    let q = query::parse_get(qs).map_err(|e| e.to_string())?;
    query::execute(&ctx, &q, None)
        .map(|r| r.to_json())
        .map_err(|e| format!("{} {}", e.status(), e.message()))
}

/// 300 series over three hours: two hours stored as rows, the third
/// still buffered, plus late points for a stored hour (merged on read);
/// and 300 series of one point.
fn loaded() -> Db {
    let db = Db::new();
    let series = |h: usize| {
        let host = format!("h{h:03}");
        let dc = ["lga", "sjc", "ams"][h % 3].to_string();
        (host, dc)
    };
    let points = |h: usize, from: u64, to: u64| -> Vec<(u64, Value)> {
        (from..to)
            .step_by(10)
            .map(|s| {
                let v = (h as u64 * 7 + s / 10) % 97;
                if h.is_multiple_of(2) {
                    (s, Value::Int(v as i64 * (s as i64 / 10)))
                } else {
                    (s, Value::Float(v as f64 / 3.0))
                }
            })
            .collect()
    };
    for h in 0..300 {
        let (host, dc) = series(h);
        db.put("m", &[("host", &host), ("dc", &dc)], &points(h, 0, 7200));
    }
    // As many other series of the metric with one point each: a query of
    // a third of the series then reads them by key, not by scanning.
    for h in 0..300 {
        db.put(
            "m",
            &[("host", &format!("x{h:03}")), ("dc", "far")],
            &[(60, Value::Int(1))],
        );
    }
    db.db.flush_all().unwrap();
    for h in 0..300 {
        let (host, dc) = series(h);
        let tags = [("host", host.as_str()), ("dc", dc.as_str())];
        db.put("m", &tags, &points(h, 7200, 10800));
        if h.is_multiple_of(7) {
            // Late: overwrites and fills into the stored first hour.
            db.put(
                "m",
                &tags,
                &[(5, Value::Int(1000 + h as i64)), (600, Value::Float(0.5))],
            );
        }
    }
    db
}

#[test]
fn many_threads_answer_as_one() {
    let db = loaded();
    let range = format!("start={T}&end={}", T + 10800);
    let queries = [
        format!("{range}&m=sum:m"),
        format!("{range}&m=avg:1m-avg:m"),
        format!("{range}&m=max:5m-max:m{{dc=*}}"),
        format!("{range}&m=sum:rate:m"),
        format!("{range}&m=sum:rate{{counter}}:10m-sum:m{{dc=lga|sjc}}"),
        format!("{range}&m=none:1h-count:m"),
        format!("{range}&m=p95:2m-avg-zero:m{{host=h0*}}"),
        format!("start={}&end={}&m=sum:1m-sum:m", T + 3000, T + 8000),
    ];
    for qs in &queries {
        let one = run(&db, 1, QueryLimits::default(), qs);
        assert!(one.is_ok(), "{qs}: {one:?}");
        for threads in [2, 3, 8] {
            assert_eq!(
                run(&db, threads, QueryLimits::default(), qs),
                one,
                "{qs} on {threads} threads"
            );
        }
    }
}

#[test]
fn a_limit_stops_a_read_on_many_threads() {
    let db = loaded();
    let qs = format!("start={T}&end={}&m=sum:m", T + 10800);
    let limits = QueryLimits {
        max_data_points: 10_000,
        ..Default::default()
    };
    let one = run(&db, 1, limits, &qs).unwrap_err();
    assert!(
        one.starts_with(
            "413 Sorry, you have attempted to fetch more than our limit of 10000 data points"
        ),
        "{one}"
    );
    assert_eq!(run(&db, 4, limits, &qs).unwrap_err(), one);
}
