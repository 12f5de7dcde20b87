//! Memory for a batch's lists, mapped ahead by the batch's pool threads.
//!
//! A batch of many short texts makes one list per text, and only the calling thread may
//! make them: it needs the GIL. A short text's list is two small objects (the list, and
//! its array of items, up to 512 bytes), which pymalloc carves from *arenas* (1 MiB, 256
//! KiB before Python 3.10) that it maps fresh: the first write to each page of an arena
//! is a page fault, in which the kernel finds, zeroes and accounts a page (about 3 µs on
//! our hosts). For the benchmark's 473k lines that was 18k of the calling thread's 20.7k
//! faults in a two-thread batch; on 8 and 16 cores the other threads' lists wait on it.
//!
//! While a batch on several threads runs, [`Ahead`] puts an arena allocator in front of
//! CPython's (with the documented `PyObject_SetArenaAllocator`): it hands pymalloc
//! arenas that a pool thread has already mapped and populated (`MADV_POPULATE_WRITE`, or
//! a write to each page where the kernel has no such call), and asks CPython's allocator
//! for any other. Pool threads keep up to [`MAX_AHEAD`] ready ([`Ahead::help`]); what is
//! left when the batch ends is unmapped, and CPython's allocator goes back in place. An
//! arena handed out here is an anonymous private mapping of the size asked for, as
//! CPython's are, so CPython's allocator frees it as one of its own, then or later. The
//! first helper also maps the pages of the result list's array of places.
//!
//! Installed only in front of CPython's own allocator (a null context and code in
//! CPython's image): another program's allocator could not free such an arena. Not in
//! the free-threaded build, whose objects come from mimalloc. After a `fork` in another
//! thread during a batch, the child keeps the allocator, which then asks CPython's for
//! every arena; no lock here is waited on where a fork could have left it held.

use pyo3::ffi;
use pyo3::types::{PyList, PyListMethods};
use pyo3::{Bound, Python};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// At most this many arenas kept ready. Populating one takes less time than a pool
/// thread's run of texts or two, and pymalloc fills one with the lists of about 25 such
/// runs; what is still ready when the batch ends was made for nothing.
const MAX_AHEAD: usize = 2;

/// Arenas mapped and populated, for the allocator to hand out; `None` while it is not
/// installed.
static READY: Mutex<Option<Ready>> = Mutex::new(None);

struct Ready {
    /// Batches running with the allocator installed (several Python threads may each run
    /// one); it goes back when the last ends.
    batches: usize,
    /// Addresses of mappings of [`SIZE`] bytes.
    arenas: Vec<usize>,
}

/// CPython's allocator, which this one stands in front of (the same for the life of the
/// process: this one is installed only in front of CPython's own).
static PREVIOUS: OnceLock<Allocator> = OnceLock::new();
/// Whether the allocator is installed (pool threads look before making arenas ready).
static ON: AtomicBool = AtomicBool::new(false);
/// The size pymalloc asks for (learned from its first request of at least [`MIN_ARENA`]
/// bytes; 0 before).
static SIZE: AtomicUsize = AtomicUsize::new(0);
/// The smallest arena pymalloc maps: 256 KiB before Python 3.10, 1 MiB since on 64-bit
/// systems. From 3.11 on the same allocator also gets the interpreter's requests for the
/// chunks of a thread's stack of frames (16 KiB, or a larger power of two for a huge
/// frame); learning the size from one of those would hand out arenas that pymalloc never
/// takes, for the rest of the process.
const MIN_ARENA: usize = 256 << 10;
/// Arenas pymalloc took since the allocator was installed, and arenas ready or being
/// made ready: pool threads keep `min(taken + 1, MAX_AHEAD)` ready, so that a batch that
/// takes none (one of few lists, or a Python whose small objects do not come from
/// pymalloc) maps at most one for nothing.
static TAKEN: AtomicUsize = AtomicUsize::new(0);
static AHEAD: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Copy)]
struct Allocator(ffi::PyObjectArenaAllocator);
// SAFETY: CPython's arena allocator has a null context, and pymalloc calls it with the
// GIL held, from whichever thread holds it.
unsafe impl Send for Allocator {}
unsafe impl Sync for Allocator {}

/// The ready arenas, if their lock is free (it is held only for a push or a pop; after a
/// `fork` it may stay held in the child forever, so it is never waited on).
fn ready() -> Option<MutexGuard<'static, Option<Ready>>> {
    match READY.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

extern "C" fn alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if size >= MIN_ARENA {
        let _ = SIZE.compare_exchange(0, size, Ordering::Relaxed, Ordering::Relaxed);
    }
    TAKEN.fetch_add(1, Ordering::Relaxed);
    if size == SIZE.load(Ordering::Relaxed) {
        if let Some(p) = ready().and_then(|mut r| r.as_mut().and_then(|r| r.arenas.pop())) {
            AHEAD.fetch_sub(1, Ordering::Relaxed);
            return p as *mut c_void;
        }
    }
    match PREVIOUS.get().and_then(|a| a.0.alloc.map(|f| (f, a.0.ctx))) {
        Some((f, ctx)) => f(ctx, size),
        None => std::ptr::null_mut(),
    }
}

extern "C" fn free(_ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    if let Some((f, ctx)) = PREVIOUS.get().and_then(|a| a.0.free.map(|f| (f, a.0.ctx))) {
        f(ctx, ptr, size);
    }
}

/// Whether `f` is code in the same image (executable or shared library) as CPython's
/// `PyObject_SetArenaAllocator`.
fn in_cpython(f: *const c_void) -> bool {
    // SAFETY: dladdr only reads the loader's tables and writes the `Dl_info` it is given.
    unsafe {
        let mut cpython: libc::Dl_info = std::mem::zeroed();
        let mut found: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(ffi::PyObject_SetArenaAllocator as *const c_void, &mut cpython) != 0
            && libc::dladdr(f, &mut found) != 0
            && !cpython.dli_fbase.is_null()
            && cpython.dli_fbase == found.dli_fbase
    }
}

/// The allocator in front of CPython's for as long as this lives, and the result list's
/// places to map (see the module's docs). Made and dropped by the calling thread, with
/// the GIL held; its [`help`](Ahead::help) is for the pool threads.
pub struct Ahead {
    installed: bool,
    /// The result list's array of places (address, bytes), and whether a helper has
    /// mapped it.
    places: (usize, usize),
    places_mapped: AtomicBool,
}

impl Ahead {
    /// Installs the allocator (or counts one more batch using it) where CPython's own is
    /// the one in place. `out` is the batch's result list, made with all its places.
    pub fn start(_py: Python<'_>, out: &Bound<'_, PyList>) -> Self {
        // SAFETY: a list's array of `len` places.
        let places = unsafe { ((*(out.as_ptr() as *mut ffi::PyListObject)).ob_item as usize, out.len() * std::mem::size_of::<*mut ffi::PyObject>()) };
        Ahead { installed: Self::install(), places, places_mapped: AtomicBool::new(false) }
    }

    fn install() -> bool {
        let Some(mut guard) = ready() else { return false };
        if let Some(r) = guard.as_mut() {
            r.batches += 1;
            return true;
        }
        // SAFETY: reading and setting the arena allocator, with the GIL held.
        unsafe {
            let mut current = std::mem::zeroed::<ffi::PyObjectArenaAllocator>();
            ffi::PyObject_GetArenaAllocator(&mut current);
            let cpython = match (current.alloc, current.free) {
                (Some(a), Some(f)) => current.ctx.is_null() && in_cpython(a as *const c_void) && in_cpython(f as *const c_void),
                _ => false,
            };
            // (and the one this allocator forwards to: the first it found)
            let same = |a: &ffi::PyObjectArenaAllocator| a.alloc.map(|f| f as usize) == current.alloc.map(|f| f as usize) && a.free.map(|f| f as usize) == current.free.map(|f| f as usize);
            if !cpython || !same(&PREVIOUS.get_or_init(|| Allocator(current)).0) {
                return false;
            }
            *guard = Some(Ready { batches: 1, arenas: Vec::new() });
            TAKEN.store(0, Ordering::Relaxed);
            ON.store(true, Ordering::Relaxed);
            let mut ours = ffi::PyObjectArenaAllocator { ctx: std::ptr::null_mut(), alloc: Some(alloc), free: Some(free) };
            ffi::PyObject_SetArenaAllocator(&mut ours);
        }
        true
    }

    /// For a pool thread between runs of texts: the first call maps the result list's
    /// places; every call maps and populates one more arena if fewer than wanted are
    /// ready (when none is wanted: a few atomic loads).
    pub fn help(&self) {
        if !self.places_mapped.swap(true, Ordering::Relaxed) {
            populate(self.places.0 as *mut c_void, self.places.1);
        }
        let size = SIZE.load(Ordering::Relaxed);
        if !self.installed || size == 0 || !ON.load(Ordering::Relaxed) {
            return;
        }
        let want = (TAKEN.load(Ordering::Relaxed) + 1).min(MAX_AHEAD);
        let ahead = AHEAD.load(Ordering::Relaxed);
        if ahead >= want || AHEAD.compare_exchange(ahead, ahead + 1, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return;
        }
        if let Some(p) = populated(size) {
            if let Some(mut guard) = ready() {
                if let Some(r) = guard.as_mut() {
                    r.arenas.push(p as usize);
                    return;
                }
            }
            // (the allocator went back meanwhile, or its lock is taken: not wanted now)
            // SAFETY: the mapping just made, handed to no one.
            unsafe { libc::munmap(p, size) };
        }
        AHEAD.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        if !self.installed {
            return;
        }
        // (the lock is free unless a pool thread is pushing: this waits only for that)
        let mut guard = READY.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = guard.as_mut() else { return };
        r.batches -= 1;
        if r.batches > 0 {
            return;
        }
        ON.store(false, Ordering::Relaxed);
        let size = SIZE.load(Ordering::Relaxed);
        for p in r.arenas.drain(..) {
            // SAFETY: a mapping of `size` bytes made by `help`, handed to no one.
            unsafe { libc::munmap(p as *mut c_void, size) };
            AHEAD.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(mut previous) = PREVIOUS.get().map(|a| a.0) {
            // SAFETY: putting CPython's allocator back, with the GIL held.
            unsafe { ffi::PyObject_SetArenaAllocator(&mut previous) };
        }
        *guard = None;
    }
}

/// Maps the pages of the `len` bytes at `ptr` that are not mapped yet, without changing
/// what they hold (Linux's `MADV_POPULATE_WRITE`; elsewhere nothing), so that the thread
/// that writes there takes no page faults. Safe while another thread writes there.
fn populate(ptr: *mut c_void, len: usize) {
    #[cfg(target_os = "linux")]
    if len > 0 {
        // SAFETY: sysconf reads a constant of the system.
        let page = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize).max(1);
        let start = ptr as usize / page * page;
        // SAFETY: memory of this process that may be written; the call maps pages and
        // never changes what they hold (an error leaves them as they were).
        unsafe { libc::madvise(start as *mut c_void, ptr as usize + len - start, libc::MADV_POPULATE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// Pages are this size or larger.
const PAGE: usize = 4096;

/// A new anonymous private mapping of `size` bytes whose pages are all mapped.
fn populated(size: usize) -> Option<*mut c_void> {
    // SAFETY: a new mapping, written only here, before anyone else sees it.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if p == libc::MAP_FAILED {
            return None;
        }
        #[cfg(target_os = "linux")]
        if libc::madvise(p, size, libc::MADV_POPULATE_WRITE) == 0 {
            return Some(p);
        }
        for at in (0..size).step_by(PAGE) {
            std::ptr::write_volatile((p as *mut u8).add(at), 0);
        }
        Some(p)
    }
}
