//! Query semantics that cannot be set up over a protocol: a tag value UID
//! deleted under existing series (OpenTSDB has no HTTP call for that),
//! run against the query library over an in-memory store. Everything that
//! can be expressed as requests lives in `tests/compat/query/*.case`.

use crate::common;

use common::{Db, T};
use rtsdb::model::UidKind;

fn two_hosts() -> Db {
    let db = Db::new();
    db.ints(
        "sys.cpu.user",
        &[("host", "web01"), ("dc", "lga")],
        &[(0, 1), (60, 2)],
    );
    db.ints(
        "sys.cpu.user",
        &[("host", "web02"), ("dc", "lga")],
        &[(0, 3), (60, 4)],
    );
    db
}

#[test]
fn deleted_tag_uids_skip_series_instead_of_failing() {
    let db = two_hosts();
    db.uids().delete(UidKind::TagValue, "web02").unwrap();
    let v = db.get_value(&format!("start={T}&m=sum:sys.cpu.user&show_stats"));
    assert_eq!(v[0]["dps"][T.to_string()], 1);
    assert_eq!(v[0]["stats"]["unresolvedSeries"], 1);
}
