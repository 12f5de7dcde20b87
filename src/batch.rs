//! Running work on several cores: rayon pools, one per requested size, created once and
//! reused, and recreated in a forked child (whose copy of a parent's pool has no threads).

use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

struct Pools {
    pid: u32,
    pools: Vec<(usize, Arc<ThreadPool>)>,
}

static POOLS: Mutex<Pools> = Mutex::new(Pools { pid: 0, pools: Vec::new() });

/// The number of cores this process may use.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A pool of `min(threads, cores)` workers (at least one), shared by all callers.
pub fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    let n = threads.clamp(1, available_cores());
    let mut guard = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if guard.pid != pid {
        // A forked child inherits the parent's pools but none of their threads: using them
        // would block forever. Forget them (their drop would talk to threads that don't
        // exist) and start afresh.
        for (_, p) in guard.pools.drain(..) {
            std::mem::forget(p);
        }
        guard.pid = pid;
    }
    if let Some((_, p)) = guard.pools.iter().find(|(k, _)| *k == n) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("tokenmill-{i}"))
            .build()
            .map_err(|e| Error::ThreadPool(e.to_string()))?,
    );
    guard.pools.push((n, p.clone()));
    Ok(p)
}

/// Maps `f` over `items` in parallel on `threads` workers, keeping the order; the first
/// error (in item order) is returned.
pub fn map<T, R, F>(items: &[T], threads: usize, f: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> Result<R> + Sync + Send,
{
    if items.len() <= 1 || threads <= 1 || available_cores() == 1 {
        return items.iter().map(f).collect();
    }
    let pool = pool(threads)?;
    pool.install(|| items.par_iter().map(|t| f(t)).collect())
}

/// Runs `f(i)` for every `i` in `0..n` on `threads` workers; returns when all have run.
pub fn for_each_index<F>(n: usize, threads: usize, f: F) -> Result<()>
where
    F: Fn(usize) + Sync + Send,
{
    if n <= 1 || threads <= 1 || available_cores() == 1 {
        (0..n).for_each(f);
        return Ok(());
    }
    pool(threads)?.install(|| (0..n).into_par_iter().for_each(f));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_order_and_reports_errors() {
        let v: Vec<u32> = (0..1000).collect();
        assert_eq!(map(&v, 4, |x| Ok(x * 2)).unwrap(), v.iter().map(|x| x * 2).collect::<Vec<_>>());
        let r = map(&v, 4, |&x| if x == 500 { Err(Error::UnknownTokenId(x)) } else { Ok(x) });
        assert_eq!(r, Err(Error::UnknownTokenId(500)));
    }

    #[test]
    fn for_each_index_visits_every_index_once() {
        let seen: Vec<std::sync::atomic::AtomicU32> = (0..500).map(|_| Default::default()).collect();
        for_each_index(seen.len(), 3, |i| {
            seen[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        assert!(seen.iter().all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 1));
    }

    #[test]
    fn pools_are_reused() {
        let a = pool(2).unwrap();
        let b = pool(2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
