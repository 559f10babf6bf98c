//! `tsdb query`: OpenTSDB's command-line query (`CliQuery`), answered by
//! the query engine and printed one point per line:
//! `<metric> <timestamp ms> <value> {tag=value, ...}`.

use std::io::Write;

use clap::Args;

use super::Context;
use super::query_args::{self, CliSubQuery};
use crate::model::{Value, java};
use crate::query::{self, QueryContext, TsQuery};

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// Accepted for compatibility (gnuplot output is not produced).
    #[arg(long, value_name = "BASEPATH")]
    pub graph: Option<String>,
    // The usage text as help (a doc comment would be read as rustdoc links).
    #[arg(
        allow_hyphen_values = true,
        help = "START-DATE [END-DATE] <aggregator> [rate] [counter,max,reset] [downsample <ms> <agg>] <metric> [tagk=tagv ...] [more queries]"
    )]
    pub query: Vec<String>,
}

/// The sub-query in the `m=` grammar of `/api/query`.
fn m_param(q: &CliSubQuery) -> String {
    let mut m = q.aggregator.clone();
    if let Some(r) = &q.rate {
        if r.counter {
            m.push_str(&format!(
                ":rate{{counter,{},{}}}",
                r.counter_max, r.reset_value
            ));
        } else {
            m.push_str(":rate");
        }
    }
    if let Some((ms, agg)) = &q.downsample {
        m.push_str(&format!(":{ms}ms-{agg}"));
    }
    m.push(':');
    m.push_str(&q.metric);
    if !q.tags.is_empty() {
        let tags: Vec<String> = q.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        m.push_str(&format!("{{{}}}", tags.join(",")));
    }
    m
}

pub(crate) fn run(
    ctx: &Context,
    a: QueryArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let now = super::now_ms();
    let cli = match query_args::parse(&a.query, now) {
        Ok(q) => q,
        Err(e) => {
            writeln!(
                err,
                "{e}\nUsage: query [Gnuplot opts] START-DATE [END-DATE] <aggregator> [rate] [counter,max,reset] [downsample N FUNC] <metric> [<tagk=tagv>] [...<tagk=tagv>] [...queries]"
            )?;
            return Ok(2);
        }
    };
    let db = ctx.open_db()?;
    let mut tsq = TsQuery {
        start: Some(cli.start_ms.to_string()),
        end: cli.end_ms.map(|e| e.to_string()),
        ms_resolution: true,
        ..TsQuery::default()
    };
    for sub in &cli.queries {
        match query::request::parse_m_subquery(&m_param(sub)) {
            Ok(s) => tsq.queries.push(s),
            Err(e) => {
                writeln!(err, "{}", e.message())?;
                return Ok(1);
            }
        }
    }
    let qctx = QueryContext::new(&db, &query::QueryOptions::default());
    let response = match query::execute(&qctx, &tsq, None) {
        Ok(r) => r,
        Err(e) => {
            writeln!(err, "{}", e.message())?;
            return Ok(1);
        }
    };
    for result in &response.results {
        let keys: Vec<&str> = result.tags.keys().map(|k| k.as_str()).collect();
        // SpanGroup.getTags is a default-sized HashMap: print in its order.
        let order = java::hashmap_order(&keys, 16);
        let tagz = java::map_to_string(order.iter().map(|k| (*k, result.tags[*k].as_str())));
        for (ts, v) in &result.dps {
            let value = match v {
                Value::Int(i) => i.to_string(),
                Value::Float(f) => java::format_f(*f),
            };
            writeln!(out, "{} {ts} {value} {tagz}", result.metric)?;
        }
    }
    Ok(0)
}
