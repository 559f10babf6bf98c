//! Bad input never panics: every public parser that reads client bytes
//! (the `/api/put` body parser has its own property test beside it), and the
//! query engine on random but well-formed-looking requests, must answer
//! with an error or a result.

use crate::common;

use proptest::prelude::*;
use rtsdb::model::Tsuid;
use rtsdb::model::time::{parse_datetime, parse_duration};
use rtsdb::model::{Uid, UidWidth, UidWidths, Value};
use rtsdb::protocol::telnet as line;
use rtsdb::query;

/// Pieces clients send, glued at random: nearer to real input than noise.
fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("sum".to_string()),
        Just("avg".to_string()),
        Just("p99".to_string()),
        Just("none".to_string()),
        Just("rate".to_string()),
        Just("rate{counter,100,5}".to_string()),
        Just("rate{dropcounter}".to_string()),
        Just("1m-avg".to_string()),
        Just("0all-sum".to_string()),
        Just("1dc-max-nan".to_string()),
        Just("5s-count-null".to_string()),
        Just("1n-dev-zero".to_string()),
        Just("sys.cpu".to_string()),
        Just("{host=*}".to_string()),
        Just("{host=web01|web02}".to_string()),
        Just("{}{dc=regexp(.*)}".to_string()),
        Just("{host=wildcard(w*b)}".to_string()),
        Just("{host=not_literal_or(x)}".to_string()),
        Just(":".to_string()),
        Just("-".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("=".to_string()),
        Just("explicit_tags".to_string()),
        Just("9999999999999999999".to_string()),
        Just("-1".to_string()),
        "[a-z0-9.*|=,{}()-]{0,8}".prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

fn db() -> common::Db {
    let db = common::Db::new();
    let t = common::T;
    for (host, dc) in [("web01", "lga"), ("web02", "lga"), ("web03", "sjc")] {
        db.put(
            "sys.cpu",
            &[("host", host), ("dc", dc)],
            &[
                (t, Value::Int(1)),
                (t + 10, Value::Float(2.5)),
                (t + 3600, Value::Int(-3)),
                (t + 7300, Value::Float(1e300)),
            ],
        );
    }
    db
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn put_lines(line in "[ -~\u{80}-\u{2FF}]{0,80}", words in proptest::collection::vec(fragments(), 0..12)) {
        let split: Vec<&str> = line.split(' ').collect();
        let _ = line::parse_put(&split);
        let _ = line::parse_point(&split);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let _ = line::parse_point(&w);
    }

    #[test]
    fn times_and_ids(s in "[ -~]{0,24}") {
        let _ = parse_datetime(&s, 1_700_000_000_000);
        let _ = parse_duration(&s);
        let _ = Uid::parse(&s, UidWidth::DEFAULT);
        let _ = Tsuid::parse_hex(&s, &UidWidths::default());
        let _ = rtsdb::config::parse_properties(&s);
    }
}

fn cases() -> u32 {
    // NEVER_PANIC_CASES=20000 for a longer hunt than CI's.
    std::env::var("NEVER_PANIC_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

/// One database for every case (queries only read it), so the runner is
/// driven by hand rather than by `proptest!`, which would build one per case.
#[test]
fn queries_parse_and_run() {
    let db = db();
    let strategy = (
        fragments(),
        "(1356998400|1356998400000|1h-ago|2013/01/01|0|x|)",
        "(|1357009999|now|1356990000)",
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases()));
    runner
        .run(&strategy, |(m, start, end)| {
            let mut qs = format!("start={start}&m={m}");
            if !end.is_empty() {
                qs.push_str(&format!("&end={end}"));
            }
            let _ = db.get(&qs);
            let _ = db.get(&format!("{qs}&arrays&ms&show_tsuids&show_query&show_stats"));
            let _ = db.get(&format!("start={start}&tsuid=sum:{m}"));
            let _ = query::parse_last_get(&format!("timeseries={m}&back_scan={end}"));
            let body = format!(
                r#"{{"start":"{start}","queries":[{{"aggregator":"{m}","metric":"sys.cpu","downsample":"{m}"}}]}}"#
            );
            let _ = db.post(&body);
            let _ = query::parse_post(m.as_bytes());
            let _ = query::parse_last_post(m.as_bytes());
            Ok(())
        })
        .unwrap();
}
