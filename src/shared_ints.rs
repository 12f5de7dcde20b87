//! Python int objects for token ids, shared by every encoder of the process, and the
//! filling of lists with them (compiled with the `python` feature only).
//!
//! Each id's int is made once, on first use, and kept for the life of the process:
//! putting an id in a list then costs a read of the table, not an allocation. That
//! matters most in batch calls, where building the lists is the part that runs under the
//! GIL on one core.
//!
//! Where CPython allows it ([`PERMANENT`]), the table's ints are made permanent: their
//! reference count is set so high (from Python 3.12 on: marked immortal, as CPython marks
//! `None` or small ints) that nothing can bring it to zero, and a list's places then take
//! them without counting a reference each. Building a list writes only the list: the
//! ints, 32 bytes each and spread over several MB for a large vocabulary, are neither
//! written nor even read, so they no longer push the encoder's own tables out of the CPU's
//! caches. Measured on the warm 20 MB stream from Python (lists kept): 1.04x (o200k) to
//! 1.09x (cl100k); see PERFORMANCE.md, "Lists of ids".

use std::sync::Mutex;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::encoder::Encoder;
use crate::error::Rank;
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
}

pub use permanence::PERMANENT;

/// Writes the int object of each of `n` ids into `items[0..n]`, `id(i)` giving the `i`-th
/// id, with the ints taken from [`INTS`]. `id(i)` is asked for before place `i` is
/// written, and ids of later places are asked for ahead of time (to prefetch), so the
/// ids may live in `items` itself. On an error (no memory for an int) it gives the number
/// of places written: those after them are as they were.
///
/// The int objects are made on first use, not all at once: frequent ids then tend to sit
/// together in memory (they show up early). An id's place in the table is prefetched some
/// ids ahead, and so is the int itself where it is counted (a reference count is a write
/// to it), so that the misses overlap instead of queueing.
///
/// Every id is below `enc`'s id count, so the table is sized from that, without a pass
/// over the ids.
///
/// # Safety
/// `items` must be valid for writes of `n` places, `id(i)` valid for every `i < n`, and
/// the GIL held.
pub unsafe fn put_ints(py: Python<'_>, enc: &Encoder, n: usize, id: impl Fn(usize) -> Rank, items: *mut *mut ffi::PyObject) -> Result<(), (usize, PyErr)> {
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
