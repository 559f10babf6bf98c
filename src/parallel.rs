//! Jobs run at once on scoped threads: the one shape every parallel step
//! here takes (a query's reading threads, a split fold, a read of every
//! ClickHouse shard).

/// Runs `jobs` at once, the first on the calling thread and each other on
/// a thread of its own, and returns their results in job order. A job's
/// panic is raised again here, once every job has ended.
pub(crate) fn run_all<T: Send, J: FnOnce() -> T + Send>(
    jobs: impl IntoIterator<Item = J>,
) -> Vec<T> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Vec::new();
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = jobs.map(|job| scope.spawn(job)).collect();
        let mut results = Vec::with_capacity(others.len() + 1);
        results.push(first());
        results.extend(
            others
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        results
    })
}

#[cfg(test)]
mod tests {
    use super::run_all;

    #[test]
    fn results_come_in_job_order_and_a_panic_is_raised_again() {
        let jobs = (0..5u64).map(|i| {
            move || {
                std::thread::sleep(std::time::Duration::from_millis(10 * (5 - i)));
                i * i
            }
        });
        assert_eq!(run_all(jobs), vec![0, 1, 4, 9, 16]);
        assert!(run_all(std::iter::empty::<fn() -> u8>()).is_empty());
        let caught = std::panic::catch_unwind(|| {
            run_all((0..3).map(|i| move || assert_ne!(i, 2, "job 2 fails")))
        });
        assert!(caught.is_err());
    }
}
