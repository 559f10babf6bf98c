//! Answers of Prometheus 2.42 itself (`promtool test rules` of the
//! Debian package 2.42.0+ds, printing what it got for each expression on
//! the series below, scraped every 15 s), checked against this library
//! with the windows the engine would hand it (both ends closed).

use super::*;

/// A counter with a reset after 20, and a gauge with a NaN.
const COUNTER: [f64; 13] = [3., 7., 12., 20., 2., 9., 15., 30., 31., 40., 41., 55., 60.];
const GAUGE: [f64; 13] = [
    1.5,
    -2.,
    7.25,
    f64::NAN,
    3.,
    3.,
    4.5,
    -1.,
    8.,
    2.,
    0.3,
    9.,
    1.,
];

/// The samples of `values` at 0, 15 s, 30 s…
fn scraped(values: &[f64]) -> Vec<Sample> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| Sample {
            t: i as i64 * 15_000,
            v,
        })
        .collect()
}

/// `name[range_s] offset offset_s` at `eval_s`.
fn selector(values: &[f64], range_s: i64, eval_s: i64, offset_s: i64) -> FnArg {
    let end_ms = (eval_s - offset_s) * 1000;
    let start_ms = end_ms - range_s * 1000;
    let samples = scraped(values)
        .into_iter()
        .filter(|p| p.t >= start_ms && p.t <= end_ms)
        .collect();
    FnArg::Range(RangeArg {
        series: vec![RangeSeries {
            labels: Labels::from_pairs([("__name__", "x"), ("job", "a")]),
            samples,
        }],
        start_ms,
        end_ms,
    })
}

fn only_value(name: &str, args: Vec<FnArg>, eval_s: i64) -> f64 {
    match call(
        name,
        args,
        &FnContext {
            eval_ms: eval_s * 1000,
        },
    )
    .unwrap()
    {
        FnValue::Vector(v) => {
            assert_eq!(v.len(), 1, "{name}: {v:?}");
            v[0].v
        }
        FnValue::Scalar(s) => s,
    }
}

fn check(name: &str, args: Vec<FnArg>, eval_s: i64, prometheus: f64) {
    let ours = only_value(name, args, eval_s);
    assert!(
        (ours - prometheus).abs() <= 1e-12 * prometheus.abs(),
        "{name}: {ours} but Prometheus 2.42 {prometheus}"
    );
}

fn scalar_vector(v: f64) -> FnArg {
    FnArg::Vector(vec![VectorSample {
        labels: Labels::default(),
        t: 0,
        v,
    }])
}

#[test]
fn range_functions_agree_with_prometheus() {
    // rate(c[1m]) at 2m, rate(c[50s]) at 1m50s, increase(c[2m]) at 3m,
    // increase(c[1m] offset 20s) at 3m, …
    check(
        "rate",
        vec![selector(&COUNTER, 60, 120, 0)],
        120,
        4.8333333333333334E-01,
    );
    check(
        "rate",
        vec![selector(&COUNTER, 50, 110, 0)],
        110,
        6.222222222222222E-01,
    );
    check(
        "increase",
        vec![selector(&COUNTER, 120, 180, 0)],
        180,
        5.8E+01,
    );
    check(
        "increase",
        vec![selector(&COUNTER, 60, 180, 20)],
        180,
        1.4666666666666666E+01,
    );
    check("delta", vec![selector(&GAUGE, 60, 120, 0)], 120, 5E+00);
    check(
        "irate",
        vec![selector(&COUNTER, 60, 60, 0)],
        60,
        1.3333333333333333E-01,
    );
    check("idelta", vec![selector(&GAUGE, 60, 180, 0)], 180, -8E+00);
    check(
        "deriv",
        vec![selector(&GAUGE, 120, 180, 0)],
        180,
        5.111111111111111E-03,
    );
    let args = vec![selector(&COUNTER, 120, 180, 0), FnArg::Scalar(100.0)];
    check("predict_linear", args, 180, 1.0824444444444444E+02);
    let args = vec![
        selector(&COUNTER, 180, 180, 0),
        FnArg::Scalar(0.3),
        FnArg::Scalar(0.6),
    ];
    check("holt_winters", args, 180, 5.7944396687087824E+01);
    check(
        "stddev_over_time",
        vec![selector(&COUNTER, 180, 180, 0)],
        180,
        1.8716508550146106E+01,
    );
    check(
        "avg_over_time",
        vec![selector(&COUNTER, 180, 180, 0)],
        180,
        2.5E+01,
    );
    let args = vec![FnArg::Scalar(0.3), selector(&COUNTER, 180, 180, 0)];
    check("quantile_over_time", args, 180, 1.0799999999999999E+01);
    check("changes", vec![selector(&GAUGE, 180, 180, 0)], 180, 1.1E+01);
}

#[test]
fn instant_functions_agree_with_prometheus() {
    // year(vector(NaN)): Go's calendar at the lowest int64.
    check("year", vec![scalar_vector(f64::NAN)], 60, 2.92277026596E+11);
    check("month", vec![scalar_vector(1e20)], 60, 1.2E+01);
    check("day_of_week", vec![scalar_vector(-1e10)], 60, 1E+00);
    check("days_in_month", vec![scalar_vector(-1e15)], 60, 3E+01);
    check("day_of_year", vec![scalar_vector(1e15)], 60, 1.87E+02);
    check("round", vec![scalar_vector(-2.5)], 60, -2E+00);
    check(
        "round",
        vec![scalar_vector(0.15), FnArg::Scalar(0.1)],
        60,
        2E-01,
    );
    check("deg", vec![scalar_vector(1.234)], 60, 7.070299191914359E+01);
    let nan_clamp = only_value(
        "clamp",
        vec![
            scalar_vector(f64::NAN),
            FnArg::Scalar(f64::NEG_INFINITY),
            FnArg::Scalar(3.0),
        ],
        60,
    );
    assert!(nan_clamp.is_nan());
}

#[test]
fn label_replace_expands_as_prometheus() {
    let input = FnArg::Vector(vec![VectorSample {
        labels: Labels::from_pairs([("__name__", "l"), ("instance", "web01:9100"), ("a", "x y")]),
        t: 0,
        v: 1.0,
    }]);
    let s = |x: &str| FnArg::String(x.to_string());
    let template = "$1x|${1}x|${a b}|$$|$2";
    let args = vec![input, s("d"), s(template), s("instance"), s(r"(.*):(\d+)")];
    let FnValue::Vector(out) = call("label_replace", args, &FnContext { eval_ms: 0 }).unwrap()
    else {
        panic!("label_replace gives a vector");
    };
    // Prometheus 2.42: d="|web01x|${a b}|$|9100".
    assert_eq!(out[0].labels.get("d"), "|web01x|${a b}|$|9100");
}
