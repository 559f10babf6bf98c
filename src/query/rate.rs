//! Rate of change per second (`RateSpan`, `RateOptions`), with counter
//! wrap-around, reset values and dropped resets.

use serde::{Deserialize, Serialize};

use crate::model::Value;
use crate::protocol::jackson;

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
mod tests {
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
}
