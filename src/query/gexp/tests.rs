//! Unit tests of the gexp functions, from the scenarios of 2.4.1's
//! `test/query/expression/Test*.java` (their inputs and asserted outputs),
//! plus the places where we part from 2.4.1 on purpose.

use super::functions::*;
use super::*;
use crate::model::UidWidth;

const T0: i64 = 1356998400000;
const MIN: i64 = 60000;
/// The tests' query: five points a minute apart, end inclusive.
const RANGE: Range = Range {
    start_ms: T0,
    end_ms: T0 + 5 * MIN,
};

fn uid(id: u64) -> Uid {
    Uid::new(id, UidWidth::new(3).unwrap()).unwrap()
}

/// `SeekableViewsForTest.generator`: `n` points a minute apart from T0,
/// `first`, `first + step`, ...
fn ints(n: usize, first: i64, step: i64) -> Vec<(i64, Value)> {
    (0..n)
        .map(|i| (T0 + i as i64 * MIN, Value::Int(first + i as i64 * step)))
        .collect()
}

fn floats(n: usize, first: f64, step: f64) -> Vec<(i64, Value)> {
    (0..n)
        .map(|i| (T0 + i as i64 * MIN, Value::Float(first + i as f64 * step)))
        .collect()
}

/// A query group of metric `m` (UID `m_uid`) with tags given as
/// (key, key UID, value, value UID).
fn group(m: &str, m_uid: u64, tags: &[(&str, u64, &str, u64)], dps: Vec<(i64, Value)>) -> Series {
    let mut join_tags: Vec<TagPair> = tags
        .iter()
        .map(|&(k, ku, v, vu)| TagPair {
            k: uid(ku),
            v: uid(vu),
            k_name: k.into(),
            v_name: v.into(),
        })
        .collect();
    join_tags.sort_by_key(|t| t.k);
    Series {
        metric: Some(m.into()),
        metric_uid: Some(uid(m_uid)),
        tags: join_tags
            .iter()
            .map(|t| (t.k_name.clone(), t.v_name.clone()))
            .collect(),
        tags_map_size: join_tags.len(),
        join_tags,
        dps,
        ..Default::default()
    }
}

fn sys_cpu(dps: Vec<(i64, Value)>) -> Series {
    group("sys.cpu.user", 1, &[], dps)
}

fn params(p: &[&str]) -> Vec<String> {
    p.iter().map(|s| s.to_string()).collect()
}

fn message(e: QueryError) -> (String, Option<String>) {
    (e.message(), e.details().map(String::from))
}

/// An evaluation failure: the message twice (message and details).
fn fails(r: Result<Vec<Series>, QueryError>, want: &str) {
    assert_eq!(
        message(r.unwrap_err()),
        (want.to_string(), Some(want.to_string()))
    );
}

fn values(s: &Series) -> Vec<f64> {
    s.dps.iter().map(|p| p.1.as_f64()).collect()
}

#[test]
fn scale_keeps_integers_for_integral_factors() {
    let out = scale(vec![vec![sys_cpu(ints(5, 1, 1))]], &params(&["2"])).unwrap();
    assert_eq!(out[0].dps, ints(5, 2, 2));
    let out = scale(vec![vec![sys_cpu(ints(5, 1, 1))]], &params(&["1.5"])).unwrap();
    assert_eq!(out[0].dps, floats(5, 1.5, 1.5));
    let out = scale(vec![vec![sys_cpu(floats(5, 1.0, 1.0))]], &params(&["-2"])).unwrap();
    assert_eq!(out[0].dps, floats(5, -2.0, -2.0));
    // TestScale: factors 0 and -1 keep integers.
    let out = scale(vec![vec![sys_cpu(ints(5, 1, 1))]], &params(&["0"])).unwrap();
    assert_eq!(out[0].dps, ints(5, 0, 0));
    let out = scale(vec![vec![sys_cpu(ints(5, 1, 1))]], &params(&["-1"])).unwrap();
    assert_eq!(out[0].dps, ints(5, -1, -1));
    // Every group of every argument.
    let out = scale(
        vec![vec![sys_cpu(ints(2, 1, 1)), sys_cpu(ints(2, 10, 1))]],
        &params(&["10"]),
    )
    .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].dps, ints(2, 100, 10));
    // Java long arithmetic wraps.
    let out = scale(
        vec![vec![sys_cpu(vec![(T0, Value::Int(i64::MAX))])]],
        &params(&["2"]),
    )
    .unwrap();
    assert_eq!(out[0].dps[0].1, Value::Int(-2));
}

#[test]
fn scale_errors() {
    let one = || vec![vec![sys_cpu(ints(5, 1, 1))]];
    fails(scale(one(), &[]), "Missing scaling factor");
    fails(
        scale(one(), &params(&["abc"])),
        "Unparseable scale factor value: 0.0",
    );
    fails(
        scale(one(), &params(&["1e5"])),
        "Unparseable scale factor value: 0.0",
    );
    for bad in ["1.2.3", "-", ".", "1-"] {
        fails(
            scale(one(), &params(&[bad])),
            "Invalid parameter, must be an integer or floating point",
        );
    }
    for good in ["1.", ".5", "-.5", "-0"] {
        assert!(scale(one(), &params(&[good])).is_ok(), "{good}");
    }
    // No series argument: nothing, whatever the parameters.
    assert!(scale(vec![], &[]).unwrap().is_empty());
}

#[test]
fn absolute_values() {
    let out = absolute(vec![vec![
        sys_cpu(ints(5, -3, 1)),
        sys_cpu(floats(2, -1.5, 1.0)),
    ]]);
    assert_eq!(values(&out[0]), [3.0, 2.0, 1.0, 0.0, 1.0]);
    assert!(out[0].dps.iter().all(|p| !p.1.is_float()));
    assert_eq!(out[1].dps, floats(2, 1.5, -1.0));
}

#[test]
fn alias_names_series_and_takes_absolute_values() {
    let web = group(
        "sys.cpu.user",
        1,
        &[("host", 1, "web01", 1), ("dc", 2, "lga", 2)],
        ints(5, -10, -1),
    );
    let out = alias(vec![vec![web.clone()]], &params(&["My Alias"])).unwrap();
    assert_eq!(out[0].metric.as_deref(), Some("My Alias"));
    assert_eq!(out[0].metric_uid, None);
    assert!(out[0].tags.is_empty() && out[0].aggregate_tags.is_empty());
    // TestAlias.evaluateSubQuerySeries: -10, -11, ... come out 10, 11, ...
    assert_eq!(out[0].dps, ints(5, 10, 1));
    // The join key stays the original tags' (getTagUids).
    assert_eq!(out[0].join_tags, web.join_tags);
    // Parameters are joined with commas; @tagk takes the tag's value.
    let out = alias(
        vec![vec![web.clone()]],
        &params(&["@host", "in", "@dc.@nope"]),
    )
    .unwrap();
    assert_eq!(out[0].metric.as_deref(), Some("web01,in,lga.@nope"));
    // Without tags nothing is replaced.
    let out = alias(vec![vec![sys_cpu(ints(1, 1, 1))]], &params(&["@host"])).unwrap();
    assert_eq!(out[0].metric.as_deref(), Some("@host"));
    fails(alias(vec![vec![web]], &[]), "Missing the alias");
}

#[test]
fn alias_replaces_in_the_tag_maps_order() {
    // "hostname" hashes before "host" in a 2-entry Java HashMap, so
    // "@hostname" is replaced whole.
    let s = group(
        "m",
        1,
        &[("host", 1, "a", 1), ("hostname", 2, "b", 2)],
        ints(1, 1, 1),
    );
    let keys = ["host", "hostname"];
    let order = hashmap_order_for_test(&keys);
    let out = alias(vec![vec![s]], &params(&["@hostname"])).unwrap();
    let want = if order[0] == "hostname" { "b" } else { "aname" };
    assert_eq!(out[0].metric.as_deref(), Some(want));
}

fn hashmap_order_for_test<'a>(keys: &[&'a str]) -> Vec<&'a str> {
    crate::model::java::hashmap_order(keys, keys.len())
}

fn moving(window: &str) -> Vec<f64> {
    let out = moving_average_fn(
        vec![vec![sys_cpu(ints(5, 1, 1))]],
        &params(&[window]),
        RANGE,
    )
    .unwrap();
    assert!(out[0].dps.iter().all(|p| p.1.is_float()));
    assert_eq!(
        out[0].dps.iter().map(|p| p.0).collect::<Vec<_>>(),
        (0..5).map(|i| T0 + i * MIN).collect::<Vec<_>>()
    );
    values(&out[0])
}

#[test]
fn moving_average_windows() {
    // TestMovingAverage: values 1..5 a minute apart.
    assert_eq!(moving("1"), [1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(moving("2"), [0.0, 1.5, 2.5, 3.5, 4.5]);
    assert_eq!(moving("5"), [0.0, 0.0, 0.0, 0.0, 3.0]);
    assert_eq!(moving("6"), [0.0; 5]);
    assert_eq!(moving("'1min'"), [0.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(moving("'2min'"), [0.0, 0.0, 2.5, 3.5, 4.5]);
    assert_eq!(moving("'3min'"), [0.0, 0.0, 0.0, 3.0, 4.0]);
    assert_eq!(moving("'4min'"), [0.0, 0.0, 0.0, 0.0, 3.5]);
    assert_eq!(moving("'5min'"), [0.0; 5]);
    assert_eq!(moving("'1m'"), moving("'60s'"));
    assert_eq!(moving("'1h'"), [0.0; 5]);
    assert_eq!(moving(" 2 "), moving("2"));
}

#[test]
fn moving_average_skips_nan_and_points_outside_the_range() {
    let mut dps = floats(5, 1.0, 1.0);
    dps[1].1 = Value::Float(f64::NAN);
    dps.push((T0 + 10 * MIN, Value::Float(100.0)));
    let out = moving_average_fn(vec![vec![sys_cpu(dps)]], &params(&["2"]), RANGE).unwrap();
    // The NaN is not counted: the window reaches one point further back.
    assert_eq!(values(&out[0]), [0.0, 0.0, 2.0, 3.5, 4.5]);
}

#[test]
fn moving_average_errors() {
    let run = |p: &[&str]| moving_average_fn(vec![vec![sys_cpu(ints(5, 1, 1))]], &params(p), RANGE);
    fails(run(&[]), "Missing moving average window size");
    fails(
        run(&["0"]),
        "Moving average window must be an integer greater than zero",
    );
    fails(
        run(&["'0min'"]),
        "Moving average window must be an integer greater than zero",
    );
    fails(
        run(&["99999999999"]),
        "Invalid parameter, must be an integer",
    );
    fails(run(&["5min"]), "Unparseable window size: 5min");
    fails(run(&["'min'"]), "Invalid moving window parameter: 'min'");
    fails(run(&["'"]), "Invalid moving window parameter: '");
    fails(
        run(&["'5weeks'"]),
        "Unknown time unit=weeks in window='5weeks'",
    );
    fails(
        run(&["'99999999999s'"]),
        "Unable to parse moving window parameter: '99999999999s'",
    );
}

#[test]
fn time_shift_moves_timestamps_forward() {
    let out = time_shift(
        vec![vec![sys_cpu(ints(2, 1, 1))], vec![sys_cpu(ints(1, 9, 0))]],
        &params(&["'1min'"]),
    )
    .unwrap();
    // Only the first argument.
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].dps,
        vec![(T0 + MIN, Value::Int(1)), (T0 + 2 * MIN, Value::Int(2))]
    );
    let shifted = |p: &str| {
        time_shift(vec![vec![sys_cpu(floats(1, 1.5, 0.0))]], &params(&[p])).unwrap()[0].dps[0]
    };
    assert_eq!(shifted("'1sec'"), (T0 + 1000, Value::Float(1.5)));
    assert_eq!(shifted("'2hr'"), (T0 + 7_200_000, Value::Float(1.5)));
    assert_eq!(shifted("'1day'").0, T0 + 86_400_000);
    assert_eq!(shifted("'1days'").0, T0 + 86_400_000);
    // TestTimeShift.shiftDataPoint: a week, 130 days.
    assert_eq!(shifted("'1week'").0, T0 + 604_800_000);
    assert_eq!(shifted("'130days'").0, T0 + 130 * 86_400_000);
}

#[test]
fn time_shift_errors() {
    let run = |p: &[&str]| time_shift(vec![vec![sys_cpu(ints(2, 1, 1))]], &params(p));
    fails(run(&[]), "Need amount of timeshift to perform timeshift");
    fails(run(&["1min"]), "Invalid timeshift parameter: eg '10min'");
    fails(run(&["'min'"]), "Invalid Parameter: 'min'");
    fails(run(&["'1month'"]), "unknown time unit=month");
    fails(run(&["'0min'"]), "timeshift <= 0");
    fails(
        run(&["'99999999999min'"]),
        "For input string: \"99999999999\"",
    );
}

#[test]
fn first_diff_of_each_series() {
    let out = first_diff(vec![vec![sys_cpu(vec![
        (T0, Value::Int(1)),
        (T0 + MIN, Value::Int(4)),
        (T0 + 2 * MIN, Value::Float(2.5)),
    ])]]);
    assert_eq!(
        out[0].dps,
        vec![
            (T0, Value::Float(0.0)),
            (T0 + MIN, Value::Float(3.0)),
            (T0 + 2 * MIN, Value::Float(-1.5)),
        ]
    );
}

fn top(rank: Rank, n: &str, series: Vec<Series>) -> Vec<String> {
    highest(
        vec![series],
        &params(&[n]),
        rank,
        RANGE,
        &mut Scratch::default(),
    )
    .unwrap()
    .into_iter()
    .map(|s| s.metric.unwrap())
    .collect()
}

#[test]
fn highest_current_and_max() {
    let a = || group("sys.cpu.user", 1, &[], ints(5, 1, 1));
    let b = || group("sys.mem", 2, &[], ints(5, 10, 1));
    for rank in [Rank::Current, Rank::Max] {
        // TestHighestCurrent/TestHighestMax: top 1, 2 and 100 of two.
        assert_eq!(top(rank, "1", vec![a(), b()]), ["sys.mem"]);
        assert_eq!(top(rank, "2", vec![a(), b()]), ["sys.mem", "sys.cpu.user"]);
        assert_eq!(
            top(rank, "100", vec![a(), b()]),
            ["sys.mem", "sys.cpu.user"]
        );
        let fb = group("sys.mem", 2, &[], floats(5, 10.0, 1.0));
        assert_eq!(top(rank, "2", vec![a(), fb]), ["sys.mem", "sys.cpu.user"]);
        // Ints and doubles mixed in one series.
        let mut mixed = floats(5, 10.0, 1.5);
        for p in mixed.iter_mut().step_by(2) {
            p.1 = Value::Int(p.1.as_f64() as i64);
        }
        let m = group("sys.mem", 2, &[], mixed);
        assert_eq!(top(rank, "1", vec![a(), m]), ["sys.mem"]);
    }
    // TestHighestCurrent.evaluateTopN1with2SeriesDiffSpan: the series that
    // stops early loses even though its last value (12) is larger, as the
    // last values are kept by position among the series still running.
    let short = || group("sys.mem", 2, &[], ints(3, 10, 1));
    assert_eq!(
        top(Rank::Current, "1", vec![a(), short()]),
        ["sys.cpu.user"]
    );
    assert_eq!(top(Rank::Max, "1", vec![a(), short()]), ["sys.mem"]);
    // The chosen series come out unchanged.
    let out = highest(
        vec![vec![a(), b()]],
        &params(&["1"]),
        Rank::Max,
        RANGE,
        &mut Scratch::default(),
    )
    .unwrap();
    assert_eq!(out[0].dps, ints(5, 10, 1));
    // highestCurrent drops series without points. highestMax keeps them,
    // and by position the empty series gets the other one's maximum (and
    // the other one 0).
    let empty = || group("sys.empty", 3, &[], vec![]);
    assert_eq!(
        top(Rank::Current, "5", vec![empty(), a()]),
        ["sys.cpu.user"]
    );
    assert_eq!(
        top(Rank::Max, "5", vec![empty(), a()]),
        ["sys.empty", "sys.cpu.user"]
    );
}

#[test]
fn highest_errors() {
    let run = |p: &[&str]| {
        highest(
            vec![vec![sys_cpu(ints(5, 1, 1))]],
            &params(p),
            Rank::Current,
            RANGE,
            &mut Scratch::default(),
        )
    };
    fails(run(&[]), "Need aggregation window for moving average");
    fails(run(&["0"]), "Top n value must be greater than zero: 0");
    fails(
        run(&["not a number"]),
        "Unparseable top n value: not a number",
    );
    fails(run(&["-1"]), "Unparseable top n value: -1");
    fails(
        run(&["99999999999"]),
        "Invalid parameter, must be an integer",
    );
}

/// BaseTimeSyncedIteratorTest.oneExtraSameE: A has D=D and D=F, B has
/// D=D, D=F and D=G; E=E everywhere.
fn one_extra_same_e() -> (Vec<Series>, Vec<Series>) {
    fn tags(d: &str, du: u64) -> [(&str, u64, &str, u64); 2] {
        [("D", 1, d, du), ("E", 2, "E", 10)]
    }
    let a = vec![
        group("A", 1, &tags("D", 1), ints(3, 1, 1)),
        group("A", 1, &tags("F", 2), ints(3, 4, 1)),
    ];
    let b = vec![
        group("B", 2, &tags("D", 1), ints(3, 11, 1)),
        group("B", 2, &tags("F", 2), ints(3, 14, 1)),
        group("B", 2, &tags("G", 3), ints(3, 17, 1)),
    ];
    (a, b)
}

fn no_names(_: Uid) -> Result<String, QueryError> {
    Ok(String::new())
}

#[test]
fn sum_series_joins_by_tags() {
    // TestSumSeries.sumMultipleSeriesEach: B first, then A.
    let (a, b) = one_extra_same_e();
    let out = combine(vec![b.clone(), a.clone()], Op::Sum, &mut no_names).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(values(&out[0]), [12.0, 14.0, 16.0]);
    assert_eq!(values(&out[1]), [18.0, 20.0, 22.0]);
    assert_eq!(values(&out[2]), [17.0, 18.0, 19.0]);
    assert!(out.iter().all(|s| s.dps.iter().all(|p| p.1.is_float())));
    assert_eq!(out[2].dps[0].0, T0);
    // Tags come from the first argument's series; the metric is the
    // smallest UID; no TSUIDs, an empty annotation list, query 0.
    assert_eq!(
        out[2].tags,
        [("D".into(), "G".into()), ("E".into(), "E".into())]
    );
    assert_eq!(out[0].metric, None);
    assert_eq!(out[0].metric_uid, Some(uid(1)));
    assert_eq!(out[2].metric_uid, Some(uid(2)));
    assert_eq!(out[0].annotations, Some(vec![]));
    // With A first, the D=G series has no first-argument series: no tags.
    let out = combine(vec![a, b], Op::Sum, &mut no_names).unwrap();
    assert!(out[2].tags.is_empty());
    assert_eq!(values(&out[2]), [17.0, 18.0, 19.0]);
}

#[test]
fn diff_multiply_divide() {
    // TestDiffSeries / TestMultiplySeries / TestDivideSeries, one series
    // each: 1..5 and 10..14.
    let a = || vec![sys_cpu(ints(5, 1, 1))];
    let b = || vec![group("sys.mem", 2, &[], ints(5, 10, 1))];
    let run = |op| values(&combine(vec![a(), b()], op, &mut no_names).unwrap()[0]);
    assert_eq!(run(Op::Diff), [-9.0; 5]);
    assert_eq!(run(Op::Multiply), [10.0, 22.0, 36.0, 52.0, 70.0]);
    assert_eq!(
        run(Op::Divide),
        [0.1, 2.0 / 11.0, 3.0 / 12.0, 4.0 / 13.0, 5.0 / 14.0]
    );
    // Three arguments, left to right.
    let c = || vec![group("sys.x", 3, &[], ints(5, 2, 0))];
    let out = combine(vec![b(), a(), c()], Op::Divide, &mut no_names).unwrap();
    assert_eq!(values(&out[0])[0], 10.0 / 1.0 / 2.0);
    let out = combine(vec![b(), a(), c()], Op::Diff, &mut no_names).unwrap();
    assert_eq!(values(&out[0])[0], 7.0);
}

#[test]
fn cross_series_fills_and_division_by_zero() {
    let zero = || {
        vec![group(
            "z",
            2,
            &[],
            vec![(T0, Value::Int(0)), (T0 + MIN, Value::Float(f64::NAN))],
        )]
    };
    let a = || {
        vec![sys_cpu(vec![
            (T0, Value::Int(6)),
            (T0 + MIN, Value::Int(8)),
        ])]
    };
    // x / 0 is 0 (JEXL's lenient arithmetic); NaN counts as 0.
    let out = combine(vec![a(), zero()], Op::Divide, &mut no_names).unwrap();
    assert_eq!(values(&out[0]), [0.0, 0.0]);
    let out = combine(vec![a(), zero()], Op::Sum, &mut no_names).unwrap();
    assert_eq!(values(&out[0]), [6.0, 8.0]);
    // Points are matched by timestamp; a series without a point there
    // counts as 0 (2.4.1 would pair the n-th points, then fail).
    let gappy = || {
        vec![group(
            "g",
            2,
            &[],
            vec![(T0 + MIN, Value::Int(1)), (T0 + 2 * MIN, Value::Int(2))],
        )]
    };
    let out = combine(vec![a(), gappy()], Op::Sum, &mut no_names).unwrap();
    assert_eq!(
        out[0].dps,
        vec![
            (T0, Value::Float(6.0)),
            (T0 + MIN, Value::Float(9.0)),
            (T0 + 2 * MIN, Value::Float(2.0)),
        ]
    );
}

#[test]
fn cross_series_argument_count_and_aggregated_tags() {
    let a = || vec![sys_cpu(ints(1, 1, 1))];
    fails(
        combine(vec![a()], Op::Sum, &mut no_names),
        "Must have 2 to 26 series, got 1 instead",
    );
    fails(
        combine((0..27).map(|_| a()).collect(), Op::Sum, &mut no_names),
        "Must have 2 to 26 series, got 27 instead",
    );
    assert!(combine((0..26).map(|_| a()).collect(), Op::Sum, &mut no_names).is_ok());
    assert!(combine(vec![], Op::Sum, &mut no_names).unwrap().is_empty());
    // Aggregated tags: the union, in UID order.
    let mut x = sys_cpu(ints(1, 1, 1));
    x.aggregate_tag_uids = vec![uid(7)];
    let mut y = sys_cpu(ints(1, 1, 1));
    y.aggregate_tag_uids = vec![uid(3), uid(7)];
    let mut names = |u: Uid| Ok(format!("k{}", u.id()));
    let out = combine(vec![vec![x], vec![y]], Op::Sum, &mut names).unwrap();
    assert_eq!(out[0].aggregate_tags, ["k3", "k7"]);
}

#[test]
fn tree_strings_as_expression_tree_writes_them() {
    let t = parser::parse(
        "sumSeries(sum:a.b{host=*},scale(sum:1m-avg:c,2),sum:rate:d)",
        0,
    )
    .unwrap();
    assert_eq!(t.to_string(), "sumSeries(scale(c),a.b,d)");
    let t = parser::parse("alias(timeShift(sum:m,'1day'),x,@host)", 0).unwrap();
    assert_eq!(t.to_string(), "alias(timeshift(m),x,@host)");
    // Metrics keyed past the first 16 of a request: HashMap order.
    let t = parser::parse("sumSeries(sum:a,sum:b)", 15).unwrap();
    assert_eq!(t.to_string(), "sumSeries(b,a)");
}

#[test]
fn requests_and_their_sub_queries() {
    let q = parse_gexp("start=1h-ago&m=sum:x&exp=sumSeries(sum:a,sum:x)&exp=scale(sum:a,2)&ms")
        .unwrap();
    let metrics: Vec<&str> = q
        .query
        .queries
        .iter()
        .map(|s| s.metric.as_deref().unwrap())
        .collect();
    // m= first, then the expressions' metrics, duplicates once.
    assert_eq!(metrics, ["x", "a"]);
    assert_eq!(q.metric_index["sum:a"], 1);
    assert_eq!(q.metric_index["sum:x"], 0);
    assert_eq!(q.expressions.len(), 2);
    assert!(q.query.ms_resolution);
    let bad = |qs: &str| parse_gexp(qs).unwrap_err();
    assert_eq!(
        message(bad("start=1h-ago&exp=nope(sum:a)")),
        ("Function nope has not been implemented".into(), None)
    );
    assert_eq!(
        message(bad("start=1h-ago&exp=scale(sum:a")),
        ("Failed to parse scale(sum:a".into(), None)
    );
    assert_eq!(message(bad("start=1h-ago")).0, "Missing sub queries");
    assert_eq!(
        message(bad("exp=scale(sum:a,2)")).0,
        "Missing parameter <code>start</code>"
    );
    assert_eq!(
        message(bad("start=1h-ago&exp=scale(a:b:c:d:e,2)")).0,
        "Failed to parse scale(a:b:c:d:e,2)"
    );
}
