//! `tsdb search lookup <query>` (OpenTSDB's `Search` tool): the same
//! lookup as `/api/search/lookup`, from the series index, one line per
//! series: `<tsuid> <metric> {k=v, ...}`.

use std::io::Write;

use clap::Args;

use crate::index::lookup::{LookupQuery, lookup};
use crate::uid::UidTableError;

use super::Context;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Most series to print.
    #[arg(long, default_value_t = 1_000_000)]
    pub limit: usize,
    /// Accepted for compatibility: the series index answers either way.
    #[arg(long)]
    pub use_data_table: bool,
    /// `lookup`, then `metric{k=v,...}` or `metric k=v ...` (`*` on either
    /// side of a pair).
    #[arg(required = true)]
    pub query: Vec<String>,
}

pub(crate) fn run(
    ctx: &Context,
    args: SearchArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let mut words: &[String] = &args.query;
    if words.first().map(String::as_str) == Some("lookup") {
        words = &words[1..];
    }
    if words.is_empty() {
        writeln!(
            err,
            "Usage: search lookup <metric>{{<tagk>=<tagv>,...}} or <metric> [<tagk>=<tagv> ...]"
        )?;
        return Ok(2);
    }
    let (metric, tags) = if words.len() == 1 && words[0].contains('{') {
        match LookupQuery::parse_m(&words[0]) {
            Ok(p) => p,
            Err(e) => {
                writeln!(err, "Invalid query: {e}")?;
                return Ok(2);
            }
        }
    } else {
        let (metric, rest) = if words[0].contains('=') {
            (String::new(), words)
        } else {
            (words[0].clone(), &words[1..])
        };
        let mut tags = Vec::new();
        for w in rest {
            match w.split_once('=') {
                Some((k, v)) => tags.push((k.to_string(), v.to_string())),
                None => {
                    writeln!(err, "Invalid tag: {w}")?;
                    return Ok(2);
                }
            }
        }
        (metric, tags)
    };
    let db = ctx.open_db()?;
    let (rows, uids, index) = (db.store(), db.uids(), db.index());
    let query = LookupQuery::new(&metric, &tags, args.limit.max(1));
    let found = match lookup(uids, index, &query) {
        Ok(f) => f,
        Err(e @ UidTableError::NoSuchName { .. }) => {
            writeln!(err, "{e}")?;
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    };
    let widths = rows.widths();
    for r in found {
        let tags: Vec<String> = r.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(
            out,
            "{} {} {{{}}}",
            r.tsuid.to_hex(&widths),
            r.metric,
            tags.join(", ")
        )?;
    }
    Ok(0)
}
