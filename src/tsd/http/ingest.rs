//! What the ingest endpoints that take whole bodies of other protocols'
//! points share once a body is parsed (remote write, InfluxDB line
//! protocol, OTLP): appending the points a batch at a time, and
//! acknowledging as `/api/put` does: the answer goes once the points are
//! in the write-ahead log, or once they are durable when the request
//! asks `sync` (docs/durability.md).

use crate::db::{Appended, PendingPoint};
use crate::protocol::PointError;
use crate::tsd::TsdState;

/// Appends batches of points to the write path, remembering the last
/// append, which the answer waits on.
pub(super) struct Appender<'s> {
    state: &'s TsdState,
    last: Option<Appended>,
}

impl<'s> Appender<'s> {
    pub(super) fn new(state: &'s TsdState) -> Appender<'s> {
        Appender { state, last: None }
    }

    /// Appends `batch` and empties it: how many points went in, or why
    /// none could (counted in the server's error stats).
    pub(super) fn append(&mut self, batch: &mut Vec<PendingPoint>) -> Result<u64, PointError> {
        if batch.is_empty() {
            return Ok(0);
        }
        match self.state.db.append(batch) {
            Ok(a) => {
                let n = batch.len() as u64;
                self.last = Some(a);
                batch.clear();
                Ok(n)
            }
            Err(e) => {
                self.state.stats.count_error(&e);
                Err(e)
            }
        }
    }

    /// [`append`](Self::append) for a handler's answer: adds what went in
    /// to `written`, or puts why nothing could in `failure` and says false.
    pub(super) fn append_into(
        &mut self,
        batch: &mut Vec<PendingPoint>,
        written: &mut u64,
        failure: &mut Option<PointError>,
    ) -> bool {
        match self.append(batch) {
            Ok(n) => {
                *written += n;
                true
            }
            Err(e) => {
                *failure = Some(e);
                false
            }
        }
    }

    /// The last append, to wait on ([`acknowledge`]).
    pub(super) fn last(&self) -> Option<Appended> {
        self.last
    }
}

/// Waits as the request asks once `last` was appended: until it is
/// durable with `sync`, else as long as the write buffer's back-pressure
/// says. An error (counted) when `sync` could not be kept.
pub(super) async fn acknowledge(
    state: &TsdState,
    last: Option<Appended>,
    sync: bool,
) -> Result<(), PointError> {
    let Some(a) = last else {
        return Ok(());
    };
    if sync {
        state.db.wait_durable(a).await.inspect_err(|e| {
            state.stats.count_error(e);
        })
    } else {
        state.db.throttle(a).await;
        Ok(())
    }
}
