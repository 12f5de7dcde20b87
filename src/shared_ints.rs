//! Python int objects for token ids, shared by every encoder of the process, and the
//! filling of lists with them (compiled with the `python` feature only).
//!
//! Each id's int is made once and kept for the life of the process: putting an id in a
//! list then costs no allocation. That matters most in batch calls, where building the
//! lists is the part that runs under the GIL on one core.
//!
//! Where CPython allows it ([`PERMANENT`]), the ints are made permanent: their reference
//! count is set so high (from Python 3.12 on: marked immortal, as CPython marks `None` or
//! small ints) that nothing can bring it to zero, and a list's places then take them
//! without counting a reference each. Building a list writes only the list: the ints are
//! neither written nor even read, so they do not push the encoder's own tables out of the
//! CPU's caches. Measured on the warm 20 MB stream from Python (lists kept): 1.04x
//! (o200k) to 1.09x (cl100k); see PERFORMANCE.md, "Lists of ids".
//!
//! There, too, the ints of a vocabulary's ids are made when its encoder is, laid out 32
//! bytes apart in blocks of 256 ids ([`IntPlaces`]), so that an id's int is found by
//! arithmetic instead of a read of a table of one pointer per id (1.6 MB for o200k_base,
//! which the lists' building missed in the CPU's caches). A long text's ids then become
//! ints as the engine writes them, with the GIL released, and decoding tells these ints
//! by their address without reading them ([`IntPlaces::id_of`]). Elsewhere, for a vocabulary
//! whose ids are spread too thinly, or one of more than [`MAX_SHARED_INT`] ids, each int
//! is made on its first use and kept in a table.

use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::encoder::Encoder;
use crate::error::Rank;
use crate::vocab::Vocab;
use crate::prefetch::prefetch;

/// The shared ints, by id. The table never drops an int it holds (it lives as long as the
/// process), which is what lets permanent ints go uncounted.
///
/// The lock is held only while a list's places are filled, which runs no Python code
/// and keeps the GIL, and it is never waited for: a thread that finds it taken makes its
/// own ints (unreachable while the module runs under the GIL, as it does; it would keep
/// a free-threaded build from waiting). Waiting with the GIL held deadlocks as soon as
/// the lock's holder needs the GIL back: an earlier version, which held the lock while
/// allocating lists, hung when an allocation started a garbage collection whose
/// callback let another encoding thread take the GIL.
static INTS: Mutex<Vec<Option<Py<PyAny>>>> = Mutex::new(Vec::new());
/// Ids above this get a fresh int object each time (no vocabulary comes close).
const MAX_SHARED_INT: usize = 1 << 21;

/// How many ids ahead [`put_ints`] asks the CPU to fetch an id's place in the table,
/// and (for ints that are counted) the int object it points to.
const SLOT_AHEAD: usize = 32;
const INT_AHEAD: usize = 16;

/// Whether the table's ints are permanent. Only where the reference count is a plain
/// field of the object that an extension may write: 64-bit CPython, not the free-threaded
/// build (split, atomic counts), not the limited API, not builds that check reference
/// counts (`Py_REF_DEBUG`). Elsewhere every place of a list takes a reference, as before.
#[cfg(all(target_pointer_width = "64", not(any(Py_GIL_DISABLED, Py_LIMITED_API, PyPy, GraalPy, py_sys_config = "Py_REF_DEBUG"))))]
mod permanence {
    use pyo3::ffi;

    pub const PERMANENT: bool = true;

    /// Makes `p`, a new int that the table is about to own, permanent.
    ///
    /// From Python 3.12 on, CPython treats an object as immortal when the low 32 bits of
    /// its count, read as a signed number, are negative: `Py_DECREF` then leaves it alone.
    /// The low half is set to the value CPython gives its own immortal objects: `u32::MAX`
    /// in 3.12 and 3.13 (where `Py_INCREF` still adds to a count below that, and stops
    /// there), `3 << 30` from 3.14 on (where `Py_INCREF` leaves any negative count alone);
    /// the upper half (flags, from 3.14 on) is kept. Before 3.12 there is no such notion
    /// and the count is set to `2^62`: decrements from dropped lists would take longer
    /// than any program runs to bring it to zero.
    ///
    /// # Safety
    /// `p` must be a valid object that no other thread can reach yet, and the GIL held.
    #[inline]
    pub unsafe fn make(p: *mut ffi::PyObject) {
        #[cfg(Py_3_12)]
        {
            const IMMORTAL: ffi::Py_ssize_t = if cfg!(Py_3_14) { 3 << 30 } else { u32::MAX as ffi::Py_ssize_t };
            let count = &mut (*p).ob_refcnt.ob_refcnt;
            *count = (*count & !0xFFFF_FFFF) | IMMORTAL;
        }
        #[cfg(not(Py_3_12))]
        {
            (*p).ob_refcnt = 1 << 62;
        }
    }

    /// The first 24 bytes of a permanent one-digit int (reference count, type, size), if
    /// every int this module would lay out is then byte for byte the int CPython makes for
    /// its value (reference count aside): one 30-bit digit after a 24-byte header.
    ///
    /// # Safety
    /// The GIL must be held.
    pub unsafe fn layout_header() -> Option<[u8; 24]> {
        let ty = std::ptr::addr_of_mut!(ffi::PyLong_Type);
        if (*ty).tp_basicsize != 24 || (*ty).tp_itemsize != 4 {
            return None;
        }
        let template = ffi::PyLong_FromLong(1000);
        if template.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        let mut header = [0u8; 24];
        std::ptr::copy_nonoverlapping(template as *const u8, header.as_mut_ptr(), 24);
        ffi::Py_DECREF(template);
        let mut made = [0u64; 4];
        super::write_int(made.as_mut_ptr() as *mut u8, &header, 0);
        make(made.as_mut_ptr() as *mut ffi::PyObject);
        std::ptr::copy_nonoverlapping(made.as_ptr() as *const u8, header.as_mut_ptr(), 24);
        for v in [1 << super::BLOCK_BITS, 1000, 65_535, 65_536, 1 << 20 | 5, super::MAX_SHARED_INT as u32 - 1] {
            let real = ffi::PyLong_FromLong(v as std::ffi::c_long);
            if real.is_null() {
                ffi::PyErr_Clear();
                return None;
            }
            let mut ours = [0u64; 4];
            super::write_int(ours.as_mut_ptr() as *mut u8, &header, v);
            let same = std::slice::from_raw_parts(real as *const u8, 28)[8..] == std::slice::from_raw_parts(ours.as_ptr() as *const u8, 28)[8..]
                && ffi::PyLong_AsLong(ours.as_mut_ptr() as *mut ffi::PyObject) == v as std::ffi::c_long;
            ffi::Py_DECREF(real);
            if !same {
                return None;
            }
        }
        Some(header)
    }
}

#[cfg(not(all(target_pointer_width = "64", not(any(Py_GIL_DISABLED, Py_LIMITED_API, PyPy, GraalPy, py_sys_config = "Py_REF_DEBUG")))))]
mod permanence {
    use pyo3::ffi;

    pub const PERMANENT: bool = false;

    /// Takes the table's own reference to `p`, a new int it is about to own.
    ///
    /// # Safety
    /// `p` must be a valid object, and the GIL held.
    #[inline]
    pub unsafe fn make(p: *mut ffi::PyObject) {
        ffi::Py_INCREF(p);
    }

    /// Ints are laid out only where they are permanent.
    ///
    /// # Safety
    /// None needed; `unsafe` as its counterpart.
    pub unsafe fn layout_header() -> Option<[u8; 24]> {
        None
    }
}

pub use permanence::PERMANENT;

/// Ids are placed in blocks of `1 << BLOCK_BITS`: block 0 holds ids 0-255, whose ints are
/// CPython's own cached small ints (laid out one after another, 32 bytes apart, in every
/// version this was checked on), so that a list's small ints are the objects CPython
/// itself uses, as in tiktoken's lists; every other block lies in a segment of ints made
/// by this module.
const BLOCK_BITS: u32 = 8;
const BLOCKS: usize = MAX_SHARED_INT >> BLOCK_BITS;
/// The ints made here come in segments of `1 << SEGMENT_BITS` ids (2 MiB each), allocated
/// as vocabularies need them and never freed or moved.
const SEGMENT_BITS: u32 = 16;
/// Bytes per int: a one-digit int takes 28 (header 16, size 8, digit 4), and CPython's
/// small ints lie this far apart.
const INT_BYTES: usize = 32;

/// Where the int of each id is, computed from the id instead of read from a table: the
/// address of its block plus 32 bytes an id. Putting an id in a list then reads nothing
/// but the block's address (a few KB for a whole vocabulary), with no branch, and the
/// engine can write the ints of a long text straight into its list while it encodes,
/// with the GIL released (the ints exist, are permanent, and are never moved).
pub struct IntPlaces {
    blocks: [usize; BLOCKS],
    /// The segments' addresses (0: none yet).
    segments: [usize; MAX_SHARED_INT >> SEGMENT_BITS],
    /// Ids below this have their int.
    count: usize,
    /// Where the segments lie, one after another, when they were mapped as one range
    /// (on Unix; `range_len` is 0 elsewhere): every object in it is one of these ints.
    range_base: usize,
    range_len: usize,
}

impl IntPlaces {
    /// The int object of `id` (below the count of ids prepared), a borrowed pointer.
    #[inline(always)]
    pub fn get(&self, id: Rank) -> *mut ffi::PyObject {
        let id = id as usize;
        (self.blocks[(id >> BLOCK_BITS) % BLOCKS] + (id & ((1 << BLOCK_BITS) - 1)) * INT_BYTES) as *mut ffi::PyObject
    }

    /// The value of `obj` when it is one of these ints (0-255 among CPython's, or one in
    /// the mapped range), found from its address alone: decoding a list of them then reads
    /// no int object. `None` for any other object.
    #[inline(always)]
    pub fn id_of(&self, obj: *mut ffi::PyObject) -> Option<Rank> {
        let laid_out = (obj as usize).wrapping_sub(self.range_base);
        if laid_out < self.range_len {
            return Some((laid_out / INT_BYTES) as Rank);
        }
        let small = (obj as usize).wrapping_sub(self.blocks[0]);
        (small < INT_BYTES << BLOCK_BITS).then_some((small / INT_BYTES) as Rank)
    }
}

/// The current [`IntPlaces`] (null before the first [`prepare`], or where ints cannot be
/// laid out). Each is leaked: a larger vocabulary publishes a new one that extends the
/// last, and readers that loaded the old one keep a valid one.
static PLACES: AtomicPtr<IntPlaces> = AtomicPtr::new(std::ptr::null_mut());
/// Set once laying ints out was found not to give CPython's own objects (an int layout
/// this module does not know): the table above is used instead.
static NO_LAYOUT: AtomicBool = AtomicBool::new(false);
static PREPARING: Mutex<()> = Mutex::new(());

/// The laid-out ints, if they cover every id of `enc`.
#[inline]
pub fn int_places(enc: &Encoder) -> Option<&'static IntPlaces> {
    laid_out_ints().filter(|places| places.count >= enc.vocab().id_count())
}

/// The laid-out ints, whatever ids they cover (none before the first [`prepare`], or where
/// ints are not laid out).
#[inline]
pub fn laid_out_ints() -> Option<&'static IntPlaces> {
    // SAFETY: a published `IntPlaces` is leaked, never written again.
    unsafe { PLACES.load(Ordering::Acquire).as_ref() }
}

/// Makes the int of every id of `vocab` ahead of time (those below its highest id),
/// laid out so that [`IntPlaces`] can compute where each is. Only where ints are made
/// permanent ([`PERMANENT`]) and a one-digit int is laid out as this module expects
/// (checked against ints CPython makes); otherwise, and for a vocabulary of more than
/// [`MAX_SHARED_INT`] ids or whose highest id is far above its number of ids (a special
/// token given a distant id), nothing is done and lists take their ints from the table.
/// Costs 32 bytes an id, once per process, on pages of their own (o200k_base: 6.4 MB,
/// made in about 5 ms).
pub fn prepare(_py: Python<'_>, vocab: &Vocab) {
    let count = vocab.id_count();
    let ids = vocab.mergeable_count() + vocab.special_tokens().len();
    if !PERMANENT || count > MAX_SHARED_INT || count > 2 * ids + (1 << SEGMENT_BITS) || NO_LAYOUT.load(Ordering::Relaxed) {
        return;
    }
    let Ok(_guard) = PREPARING.try_lock() else { return };
    // SAFETY: the GIL is held; a published `IntPlaces` is never written again.
    unsafe {
        let old = PLACES.load(Ordering::Acquire).as_ref();
        if old.is_some_and(|o| o.count >= count) {
            return;
        }
        let Some(header) = permanence::layout_header() else {
            NO_LAYOUT.store(true, Ordering::Relaxed);
            return;
        };
        let mut places = Box::new(IntPlaces { blocks: [0; BLOCKS], segments: [0; MAX_SHARED_INT >> SEGMENT_BITS], count: 0, range_base: 0, range_len: 0 });
        match old {
            Some(o) => {
                places.blocks = o.blocks;
                places.segments = o.segments;
                places.count = o.count;
                places.range_base = o.range_base;
                places.range_len = o.range_len;
            }
            None => {
                let Some(small) = small_ints() else {
                    NO_LAYOUT.store(true, Ordering::Relaxed);
                    return;
                };
                places.blocks[0] = small;
                places.count = 1 << BLOCK_BITS;
            }
        }
        let first_block = places.count.div_ceil(1 << BLOCK_BITS);
        let last_block = count.div_ceil(1 << BLOCK_BITS);
        for b in first_block..last_block {
            let id = b << BLOCK_BITS;
            let s = id >> SEGMENT_BITS;
            if places.segments[s] == 0 {
                let Some(segment) = new_segment(&mut places, s) else { return };
                places.segments[s] = segment;
            }
            places.blocks[b] = places.segments[s] + (id % (1 << SEGMENT_BITS)) * INT_BYTES;
            // Every id of the block (those past the vocabulary too: the block is whole).
            for v in id..id + (1 << BLOCK_BITS) {
                write_int(places.get(v as Rank) as *mut u8, &header, v as u32);
            }
        }
        places.count = places.count.max(last_block << BLOCK_BITS);
        PLACES.store(Box::into_raw(places), Ordering::Release);
    }
}

/// Memory for segment `s` of ints, never freed. On Unix all segments lie in one range
/// mapped at the first (address space for every id up to [`MAX_SHARED_INT`], 64 MiB, of
/// which only the pages written take memory), apart from the heap: taken from the heap,
/// a segment took memory that the allocator had free for the next lists, which then
/// needed new pages (in a process that had just loaded o200k_base, the first 1 MB text's
/// list took 1,383 page faults instead of 445, 0.96x the speed). One range also lets
/// [`IntPlaces::id_of`] tell these ints by their address.
fn new_segment(places: &mut IntPlaces, s: usize) -> Option<usize> {
    const SEGMENT: usize = INT_BYTES << SEGMENT_BITS;
    #[cfg(unix)]
    {
        if places.range_len == 0 {
            let len = INT_BYTES * MAX_SHARED_INT;
            // (on Linux, not counted against the memory that may be committed)
            #[cfg(target_os = "linux")]
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
            #[cfg(not(target_os = "linux"))]
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            // SAFETY: a new private anonymous mapping; nothing else refers to it.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
            if p == libc::MAP_FAILED {
                return None;
            }
            places.range_base = p as usize;
            places.range_len = len;
        }
        Some(places.range_base + s * SEGMENT)
    }
    #[cfg(not(unix))]
    {
        let _ = (places, s);
        let layout = std::alloc::Layout::from_size_align(SEGMENT, INT_BYTES).ok()?;
        // SAFETY: the layout is not zero-sized.
        let p = unsafe { std::alloc::alloc(layout) };
        (!p.is_null()).then_some(p as usize)
    }
}

/// The address of CPython's int 0 when its cached ints 0-255 lie one after another,
/// [`INT_BYTES`] apart (making each permanent, as the table does).
///
/// # Safety
/// The GIL must be held.
unsafe fn small_ints() -> Option<usize> {
    let mut zero = 0;
    for v in 0..1usize << BLOCK_BITS {
        let p = ffi::PyLong_FromLong(v as std::ffi::c_long);
        if p.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        if v == 0 {
            zero = p as usize;
        }
        if p as usize != zero + v * INT_BYTES {
            ffi::Py_DECREF(p);
            return None;
        }
        // (the reference is kept for good, as the table keeps its ints)
        permanence::make(p);
    }
    Some(zero)
}

/// Writes at `p` (32 bytes) the one-digit int `v` with `header` (its first 24 bytes, the
/// reference count already permanent).
///
/// # Safety
/// `p` must be valid for 32 bytes of writes and aligned to 8.
unsafe fn write_int(p: *mut u8, header: &[u8; 24], v: u32) {
    std::ptr::copy_nonoverlapping(header.as_ptr(), p, 24);
    (p.add(24) as *mut u32).write(v);
    (p.add(28) as *mut u32).write(0);
}

/// Writes the int object of each of `n` ids into `items[0..n]`, `id(i)` giving the `i`-th
/// id: the laid-out ints where they cover `enc` ([`int_places`]), else the ints of
/// [`INTS`]. `id(i)` is asked for before place `i` is written, and ids of later places are
/// asked for ahead of time (to prefetch), so the ids may live in `items` itself. On an
/// error (no memory for an int) it gives the number of places written: those after them
/// are as they were.
///
/// The table's int objects are made on first use, not all at once: frequent ids then tend
/// to sit together in memory (they show up early). An id's place in the table is
/// prefetched some ids ahead, and so is the int itself where it is counted (a reference
/// count is a write to it), so that the misses overlap instead of queueing.
///
/// Every id is below `enc`'s id count, so the table is sized from that, without a pass
/// over the ids.
///
/// # Safety
/// `items` must be valid for writes of `n` places, `id(i)` valid for every `i < n`, and
/// the GIL held.
pub unsafe fn put_ints(py: Python<'_>, enc: &Encoder, n: usize, id: impl Fn(usize) -> Rank, items: *mut *mut ffi::PyObject) -> Result<(), (usize, PyErr)> {
    if let Some(places) = int_places(enc) {
        for i in 0..n {
            *items.add(i) = places.get(id(i));
        }
        return Ok(());
    }
    // Nothing between taking the lock and dropping it runs Python code: ints are not
    // tracked by the garbage collector. Anything that may start a collection (allocating
    // the list) happens before the lock is taken.
    let mut guard = match INTS.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    // (without the table, every id gets an int of its own: the same list, slower)
    let mut none = Vec::new();
    let ints = match guard.as_deref_mut() {
        Some(ints) => {
            let want = enc.vocab().id_count().min(MAX_SHARED_INT);
            if ints.len() < want {
                ints.resize_with(want, || None);
            }
            ints
        }
        None => &mut none,
    };
    for i in 0..n {
        if i + SLOT_AHEAD < n {
            if let Some(slot) = ints.get(id(i + SLOT_AHEAD) as usize) {
                prefetch(slot);
            }
        }
        if !PERMANENT && i + INT_AHEAD < n {
            if let Some(Some(obj)) = ints.get(id(i + INT_AHEAD) as usize) {
                prefetch(obj.as_ptr());
            }
        }
        let t = id(i);
        let obj = match ints.get_mut(t as usize) {
            Some(Some(obj)) => {
                let p = obj.as_ptr();
                if !PERMANENT {
                    ffi::Py_INCREF(p);
                }
                p
            }
            slot => {
                // A new reference: the list's place takes it.
                let p = ffi::PyLong_FromUnsignedLongLong(t as u64);
                if p.is_null() {
                    return Err((i, PyErr::fetch(py)));
                }
                if let Some(slot) = slot {
                    permanence::make(p);
                    *slot = Some(Bound::from_owned_ptr(py, p).unbind());
                }
                p
            }
        };
        *items.add(i) = obj;
    }
    Ok(())
}
