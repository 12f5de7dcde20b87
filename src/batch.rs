//! Running work on several cores: rayon pools, one per requested size, created once and
//! reused, and recreated in a forked child (whose copy of a parent's pool has no threads).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::{Error, Result};

struct Pools {
    pid: u32,
    pools: Vec<(usize, Arc<ThreadPool>)>,
}

static POOLS: Mutex<Pools> = Mutex::new(Pools { pid: 0, pools: Vec::new() });

/// The number of cores this process may use, read once: the standard library reads the
/// cgroup's CPU quota from files each time, which took about 25 µs of every batch call.
pub fn available_cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
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
/// error (in item order) is returned, and no item after it is started once it is known.
///
/// This thread is one of the workers: it queues the other `workers - 1` on a pool of
/// `workers` threads, yields once (see [`with_helpers`]: a woken pool thread otherwise
/// waits on the waker's CPU), and claims items with them. Before, it queued all
/// `workers` and only waited; on a 2-core VM the second pool thread then often started
/// late, and `count_tokens_batch` on two threads kept 1.5-1.9 cores busy instead of
/// 1.97 (PERFORMANCE.md, "Batches where the caller only waited"). The pool is the one of
/// `workers` threads, not the one of `workers - 1` that [`with_helpers`] would take:
/// a batch of lists keeps that one busy for its whole length, and one of its texts may
/// be cut into chunks here.
pub fn map<T, R, F>(items: &[T], threads: usize, f: F) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> Result<R> + Sync + Send,
{
    let workers = threads.min(available_cores()).min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    // Items are claimed a block at a time (about 32 blocks a worker): with a shared
    // counter touched per item, two threads decoded thousands of short lists slower than
    // one.
    let block = (items.len() / (workers * 32)).max(1);
    let claims = Claims::new(items.len().div_ceil(block));
    let failed = AtomicBool::new(false);
    let done: Mutex<Vec<(usize, Vec<Result<R>>)>> = Mutex::new(Vec::new());
    let work = || {
        let mut mine = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let Some(b) = claims.claim() else { break };
            let mut results = Vec::with_capacity(block);
            for item in &items[b * block..((b + 1) * block).min(items.len())] {
                let r = f(item);
                let stop = r.is_err();
                results.push(r);
                if stop {
                    failed.store(true, Ordering::Relaxed);
                    break;
                }
            }
            mine.push((b, results));
        }
        done.lock().unwrap_or_else(|e| e.into_inner()).append(&mut mine);
    };
    helped_on(&*pool(workers)?, vec![(); workers - 1], |()| work(), work);
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_unstable_by_key(|(b, _)| *b);
    // Blocks are claimed in order and finished up to their first error, so every item
    // before the first error was done.
    done.into_iter().flat_map(|(_, results)| results).collect()
}

/// The items of a batch, handed out in order, each once, to whichever thread asks next:
/// pool threads and the caller alike, so the caller can do a share of the work between
/// other duties instead of being one thread more than there are cores.
pub struct Claims {
    next: AtomicUsize,
    n: usize,
    closed: AtomicBool,
}

impl Claims {
    pub fn new(n: usize) -> Self {
        Self { next: AtomicUsize::new(0), n, closed: AtomicBool::new(false) }
    }

    /// The next unclaimed item, or `None` once all are taken or the claims are closed.
    pub fn claim(&self) -> Option<usize> {
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.n).then_some(i)
    }

    /// No item is handed out from now on (a batch that failed or was interrupted stops).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

/// Cuts items into bundles of consecutive items, each of a total size of at least `size`
/// or of `count` items (the last of whatever is left), so that threads claiming bundles
/// take turns at a shared counter about once per `size` of work, however small the items.
/// The items' sizes are given one at a time, in order ([`Bundler::add`]), by a loop that
/// reads them as it goes; [`Bundler::finish`] returns each bundle's items, in order,
/// covering all of them.
pub struct Bundler {
    size: usize,
    count: usize,
    bundles: Vec<std::ops::Range<usize>>,
    start: usize,
    total: usize,
    items: usize,
}

impl Bundler {
    pub fn new(size: usize, count: usize) -> Self {
        Bundler { size, count, bundles: Vec::new(), start: 0, total: 0, items: 0 }
    }

    /// The next item, of size `s`.
    #[inline]
    pub fn add(&mut self, s: usize) {
        self.items += 1;
        self.total += s;
        if self.total >= self.size || self.items - self.start >= self.count {
            self.bundles.push(self.start..self.items);
            (self.start, self.total) = (self.items, 0);
        }
    }

    /// The bundles of all the items added.
    pub fn finish(mut self) -> Vec<std::ops::Range<usize>> {
        if self.start < self.items {
            self.bundles.push(self.start..self.items);
        }
        self.bundles
    }
}

/// Items made one at a time, in order, by one thread, and handed out in order to whichever
/// thread asks next, each once and only once it is made: the taker gets the item itself
/// (and frees it when done), so a batch need not keep every item until its end. The
/// decoding batch's lists of ids go through one: the caller's thread reads them from
/// Python (it holds the GIL) a window ahead of the objects it makes.
pub struct Feed<T> {
    items: Vec<Mutex<Option<T>>>,
    /// Items `0..made` are made.
    made: AtomicUsize,
    /// The next item to hand out.
    next: AtomicUsize,
    /// Items from this index on will never be made.
    end: AtomicUsize,
}

/// What [`Feed::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken<T> {
    /// Item `.0`, now the taker's.
    Item(usize, T),
    /// The next item is not made yet.
    NotYet,
    /// Every item that will be made has been handed out.
    Done,
}

impl<T> Feed<T> {
    pub fn new(n: usize) -> Self {
        Self { items: (0..n).map(|_| Mutex::new(None)).collect(), made: AtomicUsize::new(0), next: AtomicUsize::new(0), end: AtomicUsize::new(n) }
    }

    /// Makes the next item (only the maker calls this, for items in order).
    pub fn push(&self, item: T) {
        let i = self.made.load(Ordering::Relaxed);
        *self.items[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(item);
        self.made.store(i + 1, Ordering::Release);
    }

    /// No item from `from` on will be made (or handed out, if it was): takers get `Done`
    /// once the items before it are handed out. `close(0)` stops every taker.
    pub fn close(&self, from: usize) {
        self.end.fetch_min(from, Ordering::Release);
    }

    /// The next item, if it is made.
    pub fn take(&self) -> Taken<T> {
        loop {
            let i = self.next.load(Ordering::Acquire);
            if i >= self.end.load(Ordering::Acquire) {
                return Taken::Done;
            }
            if i >= self.made.load(Ordering::Acquire) {
                return Taken::NotYet;
            }
            if self.next.compare_exchange_weak(i, i + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let item = self.items[i].lock().unwrap_or_else(|e| e.into_inner()).take();
                return Taken::Item(i, item.expect("a made item is handed out once"));
            }
        }
    }
}

/// Runs `helper` on pool threads, once for each of `each`'s values (a pool of as many
/// threads as values, up to the cores), while `caller` runs on this thread; returns what `caller`
/// returns once every helper has returned too. A panic in any of them is raised here
/// after all have finished.
///
/// The helpers are queued before `caller` starts, and this thread then yields once. Linux
/// tends to put a woken thread on the CPU of the thread that woke it; while that one keeps
/// running, the woken one waited there, measured on a 2-core VM, 2.5-2.8 ms (the median)
/// before moving to the idle core. With the yield it starts within about 20 µs.
pub fn with_helpers<T, H, C, R>(each: Vec<T>, helper: H, caller: C) -> Result<R>
where
    T: Send,
    H: Fn(T) + Sync + Send,
    C: FnOnce() -> R,
{
    Ok(helped_on(&*pool(each.len())?, each, helper, caller))
}

/// [`with_helpers`] on the pool given.
fn helped_on<T, H, C, R>(pool: &ThreadPool, each: Vec<T>, helper: H, caller: C) -> R
where
    T: Send,
    H: Fn(T) + Sync + Send,
    C: FnOnce() -> R,
{
    pool.in_place_scope(|scope| {
        let helper = &helper;
        for value in each {
            scope.spawn(move |_| helper(value));
        }
        std::thread::yield_now();
        caller()
    })
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
        for threads in [2, 3] {
            let r = map(&v, threads, |&x| if x % 400 == 399 { Err(Error::UnknownTokenId(x)) } else { Ok(x) });
            assert_eq!(r, Err(Error::UnknownTokenId(399)));
        }
        // Items claimed in blocks (here 100 or so): errors at a block's edges, and a long run.
        let w: Vec<u32> = (0..6400).collect();
        assert_eq!(map(&w, 2, |x| Ok(x + 1)).unwrap(), (1..6401).collect::<Vec<_>>());
        for bad in [[0, 1], [99, 100], [3000, 6399], [6399, 6399]] {
            let r = map(&w, 2, |&x| if bad.contains(&x) { Err(Error::UnknownTokenId(x)) } else { Ok(x) });
            assert_eq!(r, Err(Error::UnknownTokenId(bad[0])), "{bad:?}");
        }
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
        with_helpers(vec![(); 3], |()| work(), work).unwrap();
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        assert_eq!(claims.claim(), None);

        let claims = Claims::new(10);
        assert_eq!((claims.claim(), claims.claim()), (Some(0), Some(1)));
        claims.close();
        assert_eq!(claims.claim(), None);
    }

    fn bundles(sizes: impl IntoIterator<Item = usize>, size: usize, count: usize) -> Vec<std::ops::Range<usize>> {
        let mut bundler = Bundler::new(size, count);
        for s in sizes {
            bundler.add(s);
        }
        bundler.finish()
    }

    #[test]
    fn bundles_cover_the_items_in_order() {
        assert_eq!(bundles([], 10, 4), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(bundles([3], 10, 4), vec![0..1]);
        // By size: 3+3+3+3 reaches 10 at the fourth; a long item is a bundle of its own.
        assert_eq!(bundles([3, 3, 3, 3, 50, 1, 9], 10, 8), vec![0..4, 4..5, 5..7]);
        // By count: many empty items.
        assert_eq!(bundles([0; 10], 10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(bundles([0; 8], 10, 4), vec![0..4, 4..8]);
    }

    #[test]
    fn a_feed_hands_out_each_made_item_once_in_order() {
        let feed = Feed::<usize>::new(5000);
        let got: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        let take = || loop {
            match feed.take() {
                Taken::Item(i, item) => {
                    assert_eq!(item, i * 7);
                    got.lock().unwrap().push(i);
                }
                Taken::NotYet => std::hint::spin_loop(),
                Taken::Done => break,
            }
        };
        with_helpers(vec![(); 3], |()| take(), || (0..5000).for_each(|i| feed.push(i * 7))).unwrap();
        let mut got = got.into_inner().unwrap();
        got.sort_unstable();
        assert_eq!(got, (0..5000).collect::<Vec<_>>());
        assert_eq!(feed.take(), Taken::Done);

        // Not yet made, then closed: the items before the close are still handed out.
        let feed = Feed::<u8>::new(4);
        assert_eq!(feed.take(), Taken::NotYet);
        feed.push(1);
        feed.push(2);
        feed.close(2);
        assert_eq!((feed.take(), feed.take(), feed.take()), (Taken::Item(0, 1), Taken::Item(1, 2), Taken::Done));
        let feed = Feed::<u8>::new(3);
        feed.push(1);
        feed.close(0);
        assert_eq!(feed.take(), Taken::Done);
    }

    #[test]
    fn pools_are_reused() {
        let a = pool(2).unwrap();
        let b = pool(2).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }
}
