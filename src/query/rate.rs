//! Rate of change per second (`RateSpan`, `RateOptions`), with counter
//! wrap-around, reset values and dropped resets.

use serde::{Deserialize, Serialize};

use crate::model::Value;
use crate::protocol::jackson;
use crate::store::read::Point;

/// `rateOptions` of a sub-query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RateOptions {
    #[serde(deserialize_with = "jackson::boolean")]
    pub counter: bool,
    #[serde(alias = "counter_max", deserialize_with = "jackson::long")]
    pub counter_max: i64,
    #[serde(alias = "reset_value", deserialize_with = "jackson::long")]
    pub reset_value: i64,
    #[serde(alias = "drop_resets", deserialize_with = "jackson::boolean")]
    pub drop_resets: bool,
}

impl Default for RateOptions {
    fn default() -> Self {
        RateOptions {
            counter: false,
            counter_max: i64::MAX,
            reset_value: 0,
            drop_resets: false,
        }
    }
}

impl RateOptions {
    /// `QueryRpc.parseRateOptions`: `rate`, `rate{counter[,max[,reset]]}`,
    /// `rate{dropcounter,...}`, with OpenTSDB's messages.
    pub fn parse(spec: &str) -> Result<RateOptions, String> {
        if spec.len() == 4 {
            return Ok(RateOptions::default());
        }
        if spec.len() < 6 {
            return Err(format!("Invalid rate options specification: {spec}"));
        }
        let inner = spec.get(5..spec.len() - 1).unwrap_or("");
        let parts: Vec<&str> = inner.split(',').collect();
        if parts.is_empty() || parts.len() > 3 {
            return Err(format!(
                "Incorrect number of values in rate options specification, must be counter[,counter max value,reset value], recieved: {} parts",
                parts.len()
            ));
        }
        let counter_max = match parts.get(1).filter(|p| !p.is_empty()) {
            None => i64::MAX,
            Some(p) => p
                .parse()
                .map_err(|_| format!("Max value of counter was not a number, received '{p}'"))?,
        };
        let reset_value = match parts.get(2).filter(|p| !p.is_empty()) {
            None => 0,
            Some(p) => p
                .parse()
                .map_err(|_| format!("Reset value of counter was not a number, received '{p}'"))?,
        };
        Ok(RateOptions {
            counter: parts[0].ends_with("counter"),
            counter_max,
            reset_value,
            drop_resets: parts[0] == "dropcounter",
        })
    }
}

/// One series' rate computation: feed points in time order.
#[derive(Debug, Clone)]
pub(crate) struct Rate {
    opts: RateOptions,
    prev: Option<(i64, Value)>,
}

impl Rate {
    pub(crate) fn new(opts: RateOptions) -> Rate {
        Rate { opts, prev: None }
    }

    /// Feeds a row's points, in time order: the same as [`push`](Self::push)
    /// point by point. The common case, a gauge or a counter that did not
    /// reset, is computed in one loop that keeps the previous point in
    /// locals and divides the interval once for a run of equal steps;
    /// anything else goes through `push`.
    pub(crate) fn push_points(&mut self, pts: &[Point], out: &mut Vec<(i64, Value)>) {
        let mut rest = pts;
        // The last interval (ms) and its length in seconds, as `push`
        // computes it.
        let mut step = (0i64, 0f64);
        while let Some((p, tail)) = rest.split_first() {
            let Some((mut t0, mut v0)) = self.prev else {
                self.push(p.timestamp_ms() as i64, p.value(), out);
                rest = tail;
                continue;
            };
            // A run of ordinary steps, written straight into room reserved
            // for the whole rest of the row: no slot is written twice (a
            // fill then the rate), which on a large query costs a second
            // pass over memory not yet in cache. The loop keeps the
            // previous point and the output's length in locals.
            let base = out.len();
            out.reserve(rest.len());
            let mut run = 0;
            for (slot, p) in out.spare_capacity_mut().iter_mut().zip(rest) {
                let (ts, v) = (p.timestamp_ms() as i64, p.value());
                let diff = match (v0, v) {
                    (Value::Int(a), Value::Int(b)) => b.wrapping_sub(a) as f64,
                    _ => v.as_f64() - v0.as_f64(),
                };
                if ts <= t0 || (self.opts.counter && diff < 0.0) {
                    break;
                }
                let dt = ts - t0;
                if step.0 != dt {
                    step = (dt, dt as f64 / 1000.0);
                }
                slot.write((ts, Value::Float(diff / step.1)));
                (t0, v0) = (ts, v);
                run += 1;
            }
            // SAFETY: the loop wrote the first `run` spare slots, and
            // `reserve` made room for all of them.
            unsafe { out.set_len(base + run) };
            self.prev = Some((t0, v0));
            rest = &rest[run..];
            // The point that ended the run (a step back, a counter reset)
            // goes the general way.
            if let Some((p, tail)) = rest.split_first() {
                self.push(p.timestamp_ms() as i64, p.value(), out);
                rest = tail;
            }
        }
    }

    pub(crate) fn push(&mut self, ts: i64, v: Value, out: &mut Vec<(i64, Value)>) {
        let Some((t0, v0)) = self.prev.replace((ts, v)) else {
            return;
        };
        if ts <= t0 {
            return;
        }
        let secs = (ts - t0) as f64 / 1000.0;
        let ints = match (v0, v) {
            (Value::Int(a), Value::Int(b)) => Some((a, b)),
            _ => None,
        };
        let diff = match ints {
            Some((a, b)) => b.wrapping_sub(a) as f64,
            None => v.as_f64() - v0.as_f64(),
        };
        if self.opts.counter && diff < 0.0 {
            if self.opts.drop_resets {
                return;
            }
            let diff = match ints {
                Some((a, b)) => self.opts.counter_max.wrapping_sub(a).wrapping_add(b) as f64,
                None => self.opts.counter_max as f64 - v0.as_f64() + v.as_f64(),
            };
            let rate = diff / secs;
            if self.opts.reset_value > 0 && rate > self.opts.reset_value as f64 {
                out.push((ts, Value::Float(0.0)));
            } else {
                out.push((ts, Value::Float(rate)));
            }
        } else {
            out.push((ts, Value::Float(diff / secs)));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn run(opts: RateOptions, pts: &[(i64, i64)]) -> Vec<(i64, f64)> {
        let mut r = Rate::new(opts);
        let mut out = Vec::new();
        for &(t, v) in pts {
            r.push(t, Value::Int(v), &mut out);
        }
        out.into_iter().map(|(t, v)| (t, v.as_f64())).collect()
    }

    #[test]
    fn options_grammar() {
        assert_eq!(RateOptions::parse("rate").unwrap(), RateOptions::default());
        let o = RateOptions::parse("rate{counter,100,5}").unwrap();
        assert_eq!(
            (o.counter, o.counter_max, o.reset_value, o.drop_resets),
            (true, 100, 5, false)
        );
        let o = RateOptions::parse("rate{dropcounter}").unwrap();
        assert!(o.counter && o.drop_resets);
        let o = RateOptions::parse("rate{counter,,}").unwrap();
        assert_eq!(o.counter_max, i64::MAX);
        assert_eq!(
            RateOptions::parse("rate{counter,x}").unwrap_err(),
            "Max value of counter was not a number, received 'x'"
        );
        assert_eq!(
            RateOptions::parse("rate{counter,1,y}").unwrap_err(),
            "Reset value of counter was not a number, received 'y'"
        );
        assert!(
            RateOptions::parse("rate{a,b,c,d}")
                .unwrap_err()
                .ends_with("recieved: 4 parts")
        );
    }

    #[test]
    fn counter_wrap_and_resets() {
        let plain = run(RateOptions::default(), &[(0, 10), (10_000, 5)]);
        assert_eq!(plain, vec![(10_000, -0.5)]);
        let counter = RateOptions {
            counter: true,
            counter_max: 100,
            ..Default::default()
        };
        // 100 - 90 + 10 = 20 over 10 s.
        assert_eq!(run(counter, &[(0, 90), (10_000, 10)]), vec![(10_000, 2.0)]);
        let reset = RateOptions {
            reset_value: 1,
            ..counter
        };
        assert_eq!(run(reset, &[(0, 90), (10_000, 10)]), vec![(10_000, 0.0)]);
        let drop = RateOptions {
            drop_resets: true,
            ..counter
        };
        assert_eq!(
            run(drop, &[(0, 90), (10_000, 10), (20_000, 30)]),
            vec![(20_000, 2.0)]
        );
    }

    /// A sorted row of points: ints, floats (NaN among them) or both,
    /// at steps that repeat, change or go backwards.
    pub(crate) fn arb_row() -> impl proptest::strategy::Strategy<Value = Vec<Point>> {
        use proptest::prelude::*;
        let value = prop_oneof![
            (-50i64..50).prop_map(Value::Int),
            (-50.0f64..50.0).prop_map(Value::Float),
            Just(Value::Float(f64::NAN)),
            Just(Value::Int(i64::MAX)),
        ];
        proptest::collection::vec((prop_oneof![Just(10_000u64), 0u64..30_000], value), 0..40)
            .prop_map(|steps| {
                let mut t = 1_356_998_400_000u64;
                steps
                    .into_iter()
                    .map(|(dt, value)| {
                        t += dt;
                        Point::new(t, value)
                    })
                    .collect()
            })
    }

    /// `rows` (each starting at the same hour) shifted to follow each
    /// other in time, as one series' rows do.
    pub(crate) fn one_series(rows: &[Vec<Point>]) -> Vec<Vec<Point>> {
        let mut last = 0u64;
        rows.iter()
            .map(|row| {
                let row: Vec<Point> = row
                    .iter()
                    .map(|p| Point::new(p.timestamp_ms() + last, p.value()))
                    .collect();
                last = row
                    .last()
                    .map_or(last, |p| p.timestamp_ms() - 1_356_998_400_000);
                row
            })
            .collect()
    }

    fn same(a: &[(i64, Value)], b: &[(i64, Value)]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.0 == y.0
                    && match (x.1, y.1) {
                        (Value::Float(p), Value::Float(q)) => p.to_bits() == q.to_bits(),
                        (p, q) => p == q,
                    }
            })
    }

    /// Counter rows: long integer runs that climb, with resets (drops),
    /// wraps near `i64::MAX`, repeated timestamps, now and then a float.
    fn arb_counter_row() -> impl proptest::strategy::Strategy<Value = Vec<Point>> {
        use proptest::prelude::*;
        let step = prop_oneof![
            8 => (Just(10_000u64), 0i64..5_000).prop_map(|(dt, dv)| (dt, dv, false)),
            1 => (Just(10_000u64), -200i64..0).prop_map(|(dt, dv)| (dt, dv, false)),
            1 => (0u64..20_000, 0i64..100).prop_map(|(dt, dv)| (dt, dv, false)),
            1 => Just((10_000u64, 0i64, true)),
        ];
        (
            prop_oneof![Just(0i64), Just(i64::MAX - 20_000)],
            proptest::collection::vec(step, 0..300),
        )
            .prop_map(|(start, steps)| {
                let (mut t, mut v) = (1_356_998_400_000u64, start);
                steps
                    .into_iter()
                    .map(|(dt, dv, float)| {
                        t += dt;
                        v = v.wrapping_add(dv);
                        Point::new(
                            t,
                            if float {
                                Value::Float(v as f64 / 3.0)
                            } else {
                                Value::Int(v)
                            },
                        )
                    })
                    .collect()
            })
    }

    proptest::proptest! {
        /// A row fed at once gives what feeding it point by point gives,
        /// bit for bit, whatever the options and however rows split.
        #[test]
        fn rows_fed_at_once_rate_as_points_do(
            rows in proptest::collection::vec(arb_row(), 1..4),
            counter in proptest::bool::ANY,
            drop_resets in proptest::bool::ANY,
            reset_value in 0i64..3,
        ) {
            let opts = RateOptions { counter, drop_resets, reset_value, counter_max: 100 };
            let (mut a, mut b) = (Rate::new(opts), Rate::new(opts));
            let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
            for row in &one_series(&rows) {
                for p in row {
                    a.push(p.timestamp_ms() as i64, p.value(), &mut out_a);
                }
                b.push_points(row, &mut out_b);
            }
            proptest::prop_assert!(same(&out_a, &out_b), "{out_a:?} != {out_b:?}");
        }

        /// The same for counters (the integer loop), with every rate
        /// option: counterMax, resetValue and dropResets.
        #[test]
        fn counter_rows_fed_at_once_rate_as_points_do(
            rows in proptest::collection::vec(arb_counter_row(), 1..3),
            counter in proptest::bool::ANY,
            drop_resets in proptest::bool::ANY,
            reset_value in proptest::prop_oneof![proptest::strategy::Just(0i64), 1i64..1_000],
            counter_max in proptest::prop_oneof![proptest::strategy::Just(i64::MAX), 1_000i64..1_000_000],
        ) {
            let opts = RateOptions { counter, drop_resets, reset_value, counter_max };
            let (mut a, mut b) = (Rate::new(opts), Rate::new(opts));
            let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
            for row in &one_series(&rows) {
                for p in row {
                    a.push(p.timestamp_ms() as i64, p.value(), &mut out_a);
                }
                b.push_points(row, &mut out_b);
            }
            proptest::prop_assert!(same(&out_a, &out_b), "{out_a:?} != {out_b:?}");
        }
    }
}
