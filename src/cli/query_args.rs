//! The command-line query grammar shared by `tsdb scan` and `tsdb query`
//! (OpenTSDB's `CliQuery.parseCommandLineQuery`):
//! `START [END] <agg> [rate] [counter[,max[,reset]]] [downsample <ms> <agg>]
//! <metric> [tagk=tagv ...] [<agg> ...]`.

use thiserror::Error;

use crate::model::time::{TimeError, parse_datetime};

#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum QueryArgsError {
    #[error("Not enough arguments.")]
    NotEnough,
    #[error("No such aggregation function: {0}")]
    NoSuchAggregator(String),
    #[error("{0}")]
    Time(#[from] TimeError),
    #[error("Invalid {what}: '{value}' is not a number")]
    NotANumber { what: &'static str, value: String },
    #[error("invalid tag: {0}")]
    BadTag(String),
    #[error("missing metric name after '{0}'")]
    MissingMetric(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateArgs {
    pub counter: bool,
    pub counter_max: i64,
    pub reset_value: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliSubQuery {
    pub aggregator: String,
    pub rate: Option<RateArgs>,
    /// (interval in ms, aggregator)
    pub downsample: Option<(u64, String)>,
    pub metric: String,
    /// Tag filters in the order given, OpenTSDB's `k=v` syntax.
    pub tags: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CliQuery {
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    pub queries: Vec<CliSubQuery>,
}

fn aggregator(s: &str) -> Result<String, QueryArgsError> {
    if crate::query::Aggregator::by_name(s).is_some() {
        Ok(s.to_string())
    } else {
        Err(QueryArgsError::NoSuchAggregator(s.to_string()))
    }
}

fn number(what: &'static str, s: &str) -> Result<i64, QueryArgsError> {
    s.parse().map_err(|_| QueryArgsError::NotANumber {
        what,
        value: s.to_string(),
    })
}

pub(crate) fn parse(args: &[String], now_ms: u64) -> Result<CliQuery, QueryArgsError> {
    if args.len() < 3 {
        return Err(QueryArgsError::NotEnough);
    }
    let start_ms = parse_datetime(&args[0], now_ms)?;
    // As OpenTSDB: the second word is an end time if it looks like a date
    // or a positive number; otherwise it is the first aggregator.
    let second = &args[1];
    let looks_like_time = args.len() > 3
        && !second.starts_with('+')
        && (second.contains(':')
            || second.contains('/')
            || second.contains('-')
            || second.parse::<i64>().map(|n| n > 0).unwrap_or(false));
    let end_ms = if looks_like_time {
        Some(parse_datetime(second, now_ms)?)
    } else {
        None
    };
    let mut i = if end_ms.is_some() { 2 } else { 1 };
    while i < args.len() && args[i].starts_with('+') {
        i += 1; // gnuplot parameters: accepted and ignored
    }
    let mut queries = Vec::new();
    let word = |i: usize| args.get(i).map(String::as_str);
    while i < args.len() {
        let agg = aggregator(&args[i])?;
        i += 1;
        let mut rate = None;
        if word(i) == Some("rate") {
            i += 1;
            let mut r = RateArgs {
                counter: false,
                counter_max: i64::MAX,
                reset_value: 0,
            };
            if let Some(w) = word(i)
                && w.starts_with("counter")
            {
                let parts: Vec<&str> = w.split(',').collect();
                r.counter = true;
                if let Some(m) = parts.get(1).filter(|p| !p.is_empty()) {
                    r.counter_max = number("counter max", m)?;
                }
                if let Some(m) = parts.get(2).filter(|p| !p.is_empty()) {
                    r.reset_value = number("reset value", m)?;
                }
                i += 1;
            }
            rate = Some(r);
        }
        let mut downsample = None;
        if word(i) == Some("downsample") {
            let interval = word(i + 1).ok_or(QueryArgsError::NotEnough)?;
            let func = word(i + 2).ok_or(QueryArgsError::NotEnough)?;
            let interval = number("downsample interval", interval)?;
            downsample = Some((interval.max(0) as u64, aggregator(func)?));
            i += 3;
        }
        let metric = word(i)
            .ok_or_else(|| QueryArgsError::MissingMetric(agg.clone()))?
            .to_string();
        i += 1;
        let mut tags = Vec::new();
        while let Some(w) = word(i) {
            if w.get(1..).is_some_and(|r| r.contains(' '))
                || !w.get(1..).is_some_and(|r| r.contains('='))
            {
                break;
            }
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| QueryArgsError::BadTag(w.to_string()))?;
            if k.is_empty() || v.is_empty() || v.contains('=') {
                return Err(QueryArgsError::BadTag(w.to_string()));
            }
            tags.push((k.to_string(), v.to_string()));
            i += 1;
        }
        if word(i).is_some_and(|w| w.get(1..).is_some_and(|r| r.contains(' '))) {
            i += 1; // per-line plot options: ignored
        }
        queries.push(CliSubQuery {
            aggregator: agg,
            rate,
            downsample,
            metric,
            tags,
        });
    }
    Ok(CliQuery {
        start_ms,
        end_ms,
        queries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn grammar() {
        let q = parse(&v("1356998400 sum sys.cpu.user host=web01 dc=lga"), 0).unwrap();
        assert_eq!(q.start_ms, 1356998400000);
        assert_eq!(q.end_ms, None);
        assert_eq!(q.queries[0].metric, "sys.cpu.user");
        assert_eq!(q.queries[0].tags.len(), 2);
        let q = parse(
            &v("2013/01/01 2013/01/02 sum rate counter,100,5 downsample 60000 avg m1 host=* max m2"),
            0,
        )
        .unwrap();
        assert_eq!(q.end_ms, Some(1357084800000));
        assert_eq!(q.queries.len(), 2);
        let r = q.queries[0].rate.clone().unwrap();
        assert_eq!((r.counter, r.counter_max, r.reset_value), (true, 100, 5));
        assert_eq!(q.queries[0].downsample, Some((60000, "avg".to_string())));
        assert_eq!(q.queries[1].aggregator, "max");
        assert_eq!(
            parse(&v("1356998400 nope m"), 0),
            Err(QueryArgsError::NoSuchAggregator("nope".into()))
        );
        assert_eq!(
            parse(&v("1356998400 sum"), 0),
            Err(QueryArgsError::NotEnough)
        );
        assert!(parse(&v("1356998400 sum m host="), 0).is_err());
        assert!(parse(&v("1h-ago 1x-ago sum m"), 0).is_err());
    }
}
