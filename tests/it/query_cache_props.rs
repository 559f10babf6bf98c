//! Randomized: the result cache's answer is byte-identical to the
//! uncached one while a dashboard's window slides, the tail is written,
//! late points land in cached buckets, rows are deleted and new series
//! appear; over random aggregators, downsamplers (or none: raw points and
//! their rates), fill policies, rate options, group-bys, `none`,
//! `showTSUIDs` and ms resolution.

use crate::common;

use common::{Db, T};
use rtsdb::model::{UidKind, Value};
use rtsdb::query::{self, CacheOptions, QueryCache, QueryContext};
use rtsdb::store::read::SeriesSource;

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
    fn value(&mut self, float: bool) -> Value {
        if float {
            Value::Float(self.below(4000) as f64 / 8.0 - 100.0)
        } else {
            Value::Int(self.below(1000) as i64)
        }
    }
}

struct Series {
    host: String,
    dc: &'static str,
    step: u64,
    float: bool,
    alive: bool,
}

fn write(db: &Db, rng: &mut Rng, s: &Series, from: u64, to: u64) {
    let mut pts = Vec::new();
    let mut t = from - from % s.step + s.step;
    while t <= to {
        if !rng.chance(15) {
            pts.push((t, rng.value(s.float)));
        }
        t += s.step;
    }
    if !pts.is_empty() {
        db.put("m", &[("host", &s.host), ("dc", s.dc)], &pts);
    }
}

fn ctx<'a>(db: &'a Db, now_s: u64) -> QueryContext<'a> {
    let mut c = db.ctx();
    c.now_ms = (T + now_s) * 1000;
    c
}

#[test]
fn cached_answers_equal_uncached_ones() {
    let mut rng = Rng(0x5EED_CAC4E);
    let (mut hits, mut compared) = (0u64, 0u64);
    for case in 0..60 {
        let db = Db::new();
        let cache = QueryCache::new(CacheOptions {
            max_bytes: 1 << 24,
            settle_ms: [10_000, 60_000, 300_000][rng.below(3) as usize],
        });
        let mut series: Vec<Series> = (0..1 + rng.below(5))
            .map(|i| Series {
                host: format!("h{i}"),
                dc: if rng.chance(50) { "a" } else { "b" },
                step: [10, 15, 60, 90][rng.below(4) as usize],
                float: rng.chance(40),
                alive: !rng.chance(15),
            })
            .collect();
        let mut now = 7200 + rng.below(3600);
        for s in &series {
            let first = rng.below(3600);
            let last = if s.alive { now } else { now - rng.below(3000) };
            write(&db, &mut rng, s, first, last.max(first + 1));
        }
        // "": no downsampler (raw points, or the rate of each).
        let iv = rng.pick(&["1m", "5m", "7m", "2m", "", ""]);
        let f = rng.pick(&["avg", "sum", "max", "min", "count"]);
        let fill = rng.pick(&["", "", "-zero", "-nan", "-null"]);
        let agg = rng.pick(&[
            "sum", "avg", "max", "min", "zimsum", "count", "none", "dev", "pfsum",
        ]);
        let rate = rng.pick(&[
            "",
            "",
            "rate:",
            "rate{counter,1000,0}:",
            "rate{dropcounter}:",
        ]);
        let filter = rng.pick(&["", "{dc=*}", "{host=h0|h1}", "{dc=a}"]);
        let flags = format!(
            "{}{}",
            if rng.chance(30) { "&show_tsuids" } else { "" },
            if rng.chance(30) { "&ms" } else { "" }
        );
        let window = rng.pick(&["1h-ago", "90m-ago", "20m-ago"]);
        // Some windows end at a fixed time: recent, or an hour back (all
        // settled: answered without reading).
        let fixed_end = [None, None, None, Some(30), Some(3700)][rng.below(5) as usize];
        for step in 0..8 {
            if step > 0 {
                let before = now;
                now += 1 + rng.below(150);
                for s in series.iter().filter(|s| s.alive) {
                    write(&db, &mut rng, s, before, now);
                }
                if rng.chance(20) {
                    // A late point, well inside what may be cached.
                    let s = &series[rng.below(series.len() as u64) as usize];
                    let t = now - 100 - rng.below(2500);
                    db.put(
                        "m",
                        &[("host", &s.host), ("dc", s.dc)],
                        &[(t, rng.value(s.float))],
                    );
                }
                if rng.chance(8) {
                    // Deletes the hour rows of one series around an hour ago.
                    let s = &series[rng.below(series.len() as u64) as usize];
                    let metric = db.uids().get_id(UidKind::Metric, "m").unwrap();
                    let host = db.uids().get_id(UidKind::TagValue, &s.host).unwrap();
                    let doomed: Vec<_> = db
                        .db
                        .read_series(metric, 0, u64::MAX / 2, &mut |_| true)
                        .unwrap()
                        .into_iter()
                        .map(|d| d.tsuid)
                        .filter(|t| t.tags.iter().any(|&(_, v)| v == host))
                        .collect();
                    let at = (T + now - 3600 - rng.below(3600)) * 1000;
                    db.db.delete_rows(&doomed, at, at + 1).unwrap();
                }
                if rng.chance(8) {
                    let s = Series {
                        host: format!("n{step}"),
                        dc: "a",
                        step: 30,
                        float: false,
                        alive: true,
                    };
                    let from = now - rng.below(600);
                    write(&db, &mut rng, &s, from, now);
                    series.push(s);
                }
            }
            let end = match fixed_end {
                Some(back) => format!("&end={}", T + now - back),
                None => String::new(),
            };
            let ds = if iv.is_empty() {
                String::new()
            } else {
                format!("{iv}-{f}{fill}:")
            };
            let qs = format!("start={window}{end}&m={agg}:{rate}{ds}m{filter}{flags}");
            let q = query::parse_get(&qs).unwrap();
            let plain = query::execute(&ctx(&db, now), &q, None).map(|r| r.to_json());
            let before = cache.stats().hits;
            let cached = query::execute(&ctx(&db, now), &q, Some(&cache)).map(|r| r.to_json());
            hits += cache.stats().hits - before;
            compared += 1;
            match (plain, cached) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "case {case} step {step}: {qs}"),
                (Err(a), Err(b)) => assert_eq!(a.message(), b.message(), "case {case}: {qs}"),
                (a, b) => panic!("case {case} step {step}: {qs}: {a:?} vs {b:?}"),
            }
        }
    }
    // Not vacuous: a good share of the comparisons went through a hit
    // (the rest are first runs and invalidations).
    assert!(hits * 3 > compared, "{hits} hits in {compared} comparisons");
}
