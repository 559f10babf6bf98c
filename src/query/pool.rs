//! Series' output buffers kept from one query for the next.
//!
//! A query gives every series it reads a buffer for its downsampled or
//! rate outputs. Allocated afresh each time, a 1,000-series query took a
//! thousand buffers of about 10 KB from the allocator and gave them back
//! at its end: more than its thread caches hold, so each query went down
//! to the allocator's arenas and back (about a tenth of the sum-of-rate
//! query's CPU right after the bench's load), and wrote its outputs into
//! memory not in cache. Buffers given back here are handed to the next
//! query as they are, up to a bound on the memory kept.

use parking_lot::Mutex;

use crate::model::Value;

/// One series' outputs: (timestamp ms, value).
pub(crate) type Outputs = Vec<(i64, Value)>;

/// Most bytes of buffer capacity kept between queries.
const KEPT_BYTES: usize = 32 << 20;

/// Buffers kept between queries, up to [`KEPT_BYTES`] of capacity.
pub(crate) struct Pool {
    kept: Mutex<Kept>,
}

/// The buffers kept, and the bytes of capacity they hold.
struct Kept {
    buffers: Vec<Outputs>,
    bytes: usize,
}

/// The process' pool: every query's pipelines draw from it.
pub(crate) static OUTPUTS: Pool = Pool::new();

fn bytes_of(b: &Outputs) -> usize {
    b.capacity() * std::mem::size_of::<(i64, Value)>()
}

impl Pool {
    const fn new() -> Pool {
        Pool {
            kept: Mutex::new(Kept {
                buffers: Vec::new(),
                bytes: 0,
            }),
        }
    }

    /// Up to `n` empty buffers, the last given back first (fewer if fewer
    /// are kept: the caller makes the rest).
    pub(crate) fn take(&self, n: usize) -> std::vec::IntoIter<Outputs> {
        let mut kept = self.kept.lock();
        let from = kept.buffers.len().saturating_sub(n);
        let taken: Vec<Outputs> = kept.buffers.drain(from..).collect();
        kept.bytes -= taken.iter().map(bytes_of).sum::<usize>();
        taken.into_iter()
    }

    /// Keeps `buffers` (emptied) for later queries, as many as fit the
    /// bound.
    pub(crate) fn give_back(&self, buffers: impl Iterator<Item = Outputs>) {
        let mut kept = self.kept.lock();
        for mut b in buffers {
            let bytes = bytes_of(&b);
            if bytes == 0 || kept.bytes + bytes > KEPT_BYTES {
                continue;
            }
            b.clear();
            kept.bytes += bytes;
            kept.buffers.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_empty_and_the_memory_kept_is_bounded() {
        let big = (KEPT_BYTES / std::mem::size_of::<(i64, Value)>()) / 2 + 1;
        let full: Outputs = vec![(1, Value::Int(2)); 10];
        let pool = Pool::new();
        pool.give_back(
            [
                full,
                Vec::with_capacity(big),
                Vec::with_capacity(big),
                Vec::new(),
            ]
            .into_iter(),
        );
        let kept = pool.kept.lock().bytes;
        assert!(kept <= KEPT_BYTES, "{kept} bytes kept");
        let taken: Vec<Outputs> = pool.take(usize::MAX).collect();
        assert!(taken.iter().all(|b| b.is_empty() && b.capacity() > 0));
        assert!(taken.iter().any(|b| b.capacity() >= 10));
        // One of the two large buffers did not fit beside the other.
        assert!(taken.iter().filter(|b| b.capacity() >= big).count() <= 1);
        assert_eq!(pool.kept.lock().bytes, 0);
    }
}
