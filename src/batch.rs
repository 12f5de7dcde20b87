//! Running work on several cores: rayon pools, one per requested size, created once and
//! reused, and recreated in a forked child (whose copy of a parent's pool has no threads).

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The items of a batch, handed out in order, each once, to whichever thread asks next:
/// pool threads and the caller alike, so the caller can do a share of the work between
/// other duties instead of being one thread more than there are cores.
pub struct Claims {
    next: AtomicUsize,
    n: usize,
}

impl Claims {
    pub fn new(n: usize) -> Self {
        Self { next: AtomicUsize::new(0), n }
    }

    /// The next unclaimed item, or `None` once all are taken.
    pub fn claim(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.n).then_some(i)
    }
}

/// Runs `f` once on each of `helpers` pool threads (at least one) and returns when every
/// run has returned.
pub fn on_helpers<F>(helpers: usize, f: F) -> Result<()>
where
    F: Fn() + Sync + Send,
{
    pool(helpers)?.broadcast(|_| f());
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
    fn helpers_and_the_caller_claim_every_item_once() {
        let seen: Vec<std::sync::atomic::AtomicU32> = (0..5000).map(|_| Default::default()).collect();
        let claims = Claims::new(seen.len());
        let work = || {
            while let Some(i) = claims.claim() {
                seen[i].fetch_add(1, Ordering::Relaxed);
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| on_helpers(3, work).unwrap());
            work();
        });
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        assert_eq!(claims.claim(), None);
    }

    #[test]
    fn pools_are_reused() {
        let a = pool(2).unwrap();
        let b = pool(2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
