//! Token ids read out of the Python objects that decoding is given.
//!
//! Two kinds are read in place, without running any Python code:
//! * an exact list or tuple of exact ints (what decoding is nearly always given);
//! * a one-dimensional array of integers whose buffer is exported by C code known to run
//!   no Python code: numpy's `ndarray` and its subclasses that keep its buffer export
//!   (`numpy.memmap`), the standard library's `array.array`, and `memoryview`. Ids kept
//!   as arrays (`encode_to_numpy`, token shards on disk) are then read at memory speed
//!   instead of one numpy scalar at a time.
//!
//! Anything else, and any id that is negative or too large for a token id, goes through
//! PyO3's extraction, which raises the same errors as tiktoken's bindings.
//!
//! Running no Python code matters beyond speed: a decoding batch reads its lists while
//! pool threads wait on it (see `decode_batch_to` in `python.rs`), and Python code run
//! there could start a batch of its own on the same pool and wait for it.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::error::Rank;

/// Token ids from a Python object, as an argument `Vec<u32>` would take them: in place
/// where [`ids_in_place`] can, else through PyO3's extraction, for its errors.
pub(crate) fn ids_from(arg: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Rank>> {
    if !is_list_or_tuple(obj) {
        note_array_types(obj.py());
    }
    match ids_in_place(obj) {
        Some(ids) => Ok(ids),
        None => obj.extract::<Vec<Rank>>().inspect_err(|e| {
            // (the note PyO3 adds to an argument it cannot extract)
            let _ = e.value(obj.py()).call_method1("add_note", (format!("while processing '{arg}'"),));
        }),
    }
}

/// The ids of an exact list or tuple of exact ints, or of a one-dimensional integer array
/// of a type [`note_array_types`] has found, when every id fits a token id; `None` for
/// anything else. Runs no Python code.
pub(crate) fn ids_in_place(obj: &Bound<'_, PyAny>) -> Option<Vec<Rank>> {
    if exports_buffer_in_c(obj) {
        ids_of_buffer(obj)
    } else {
        ids_of_ints(obj)
    }
}

fn is_list_or_tuple(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: type checks of a live object.
    unsafe { ffi::PyList_CheckExact(obj.as_ptr()) != 0 || ffi::PyTuple_CheckExact(obj.as_ptr()) != 0 }
}

/// See [`ids_in_place`]: an exact list or tuple (`None` for anything else). PyO3's
/// extraction iterates and converts each item through generic protocols, which took about
/// half of `decode_bytes`' time.
fn ids_of_ints(obj: &Bound<'_, PyAny>) -> Option<Vec<Rank>> {
    let p = obj.as_ptr();
    // SAFETY: the object is an exact list or tuple (checked first), read under the GIL by
    // this thread only, with no Python code run meanwhile (converting an exact int runs
    // none), so its items stay as they are; each is a borrowed reference to a live object.
    unsafe {
        let (n, item): (ffi::Py_ssize_t, fn(*mut ffi::PyObject, ffi::Py_ssize_t) -> *mut ffi::PyObject) = if ffi::PyList_CheckExact(p) != 0 {
            (ffi::PyList_GET_SIZE(p), |l, i| ffi::PyList_GET_ITEM(l, i))
        } else if ffi::PyTuple_CheckExact(p) != 0 {
            (ffi::PyTuple_GET_SIZE(p), |t, i| ffi::PyTuple_GET_ITEM(t, i))
        } else {
            return None;
        };
        // Sized up front: grown as it filled, the vector of a long list was copied and
        // its pages touched again (reading the long stream's 6M ids: 29 against 18 ms).
        let mut ids = Vec::with_capacity(n as usize);
        // The ints tokenmill's lists are made of are told by their address, without
        // reading them (they lie apart in memory, by id).
        let laid_out = crate::shared_ints::laid_out_ints();
        for i in 0..n {
            let x = item(p, i);
            if let Some(id) = laid_out.and_then(|ints| ints.id_of(x)) {
                ids.push(id);
                continue;
            }
            if ffi::PyLong_CheckExact(x) == 0 {
                return None;
            }
            let mut overflow = 0;
            let v = ffi::PyLong_AsLongAndOverflow(x, &mut overflow);
            if overflow != 0 {
                return None;
            }
            ids.push(Rank::try_from(v).ok()?);
        }
        Some(ids)
    }
}

/// The buffer-exporting C functions (`bf_getbuffer`) of numpy's `ndarray` and of
/// `array.array`, as addresses, 0 until found. Extension modules are never unloaded, so an
/// address once found stays valid.
static NDARRAY_EXPORT: AtomicUsize = AtomicUsize::new(0);
static ARRAY_EXPORT: AtomicUsize = AtomicUsize::new(0);

/// Finds the buffer exports of numpy's `ndarray` and `array.array` among the modules
/// already imported (importing nothing), where not found before. May run Python code (an
/// attribute lookup), so it is called before reading, never while pool threads wait.
pub(crate) fn note_array_types(py: Python<'_>) {
    let wanted = [(&NDARRAY_EXPORT, "numpy", "ndarray"), (&ARRAY_EXPORT, "array", "array")];
    if wanted.iter().all(|(slot, _, _)| slot.load(Ordering::Relaxed) != 0) {
        return;
    }
    // SAFETY: the interpreter's module dict, borrowed while the GIL is held (a C call:
    // cheaper than importing `sys`, which a decode call of a few ids would feel).
    let modules = unsafe { Bound::from_borrowed_ptr_or_opt(py, ffi::PyImport_GetModuleDict()) };
    let Some(Ok(modules)) = modules.map(|m| m.cast_into::<PyDict>()) else {
        return;
    };
    for (slot, module, name) in wanted {
        if slot.load(Ordering::Relaxed) != 0 {
            continue;
        }
        let Ok(Some(m)) = modules.get_item(module) else {
            continue;
        };
        let Ok(t) = m.getattr(name) else {
            continue;
        };
        if let Ok(t) = t.cast::<PyType>() {
            // SAFETY: reads a live type object's buffer slots.
            if let Some(f) = unsafe { buffer_export(t.as_type_ptr()) } {
                slot.store(f, Ordering::Relaxed);
            }
        }
    }
}

/// The address of a type's `bf_getbuffer`, if it has one.
///
/// # Safety
/// `t` is a live type object.
unsafe fn buffer_export(t: *mut ffi::PyTypeObject) -> Option<usize> {
    let procs = (*t).tp_as_buffer;
    if procs.is_null() {
        return None;
    }
    (*procs).bf_getbuffer.map(|f| f as usize)
}

/// Whether `obj` exports its buffer through C code known to run no Python code: a
/// `memoryview`, or an object whose type (numpy's `ndarray`, a subclass of it that
/// inherits the export, `array.array`) uses the very function those types use. A
/// subclass that defines `__buffer__` in Python has another function and is not read here.
fn exports_buffer_in_c(obj: &Bound<'_, PyAny>) -> bool {
    let p = obj.as_ptr();
    // SAFETY: type slots of a live object.
    unsafe {
        if ffi::Py_TYPE(p) == std::ptr::addr_of_mut!(ffi::PyMemoryView_Type) {
            return true;
        }
        match buffer_export(ffi::Py_TYPE(p)) {
            Some(f) => f == NDARRAY_EXPORT.load(Ordering::Relaxed) || f == ARRAY_EXPORT.load(Ordering::Relaxed),
            None => false,
        }
    }
}

/// A buffer view, released when dropped.
struct View(ffi::Py_buffer);

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful `PyObject_GetBuffer`.
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

/// The ids in a one-dimensional buffer of native integers (any width, signed or not, any
/// stride); `None` for another shape or item type, or when an item is negative or larger
/// than a token id (those go to PyO3's extraction for its error).
fn ids_of_buffer(obj: &Bound<'_, PyAny>) -> Option<Vec<Rank>> {
    // SAFETY: the view is filled by the exporter (checked for success) and released once;
    // its items are read within `shape[0]` strides of `buf`, as the buffer protocol
    // promises for a one-dimensional view without suboffsets.
    unsafe {
        let mut raw = MaybeUninit::<ffi::Py_buffer>::zeroed();
        if ffi::PyObject_GetBuffer(obj.as_ptr(), raw.as_mut_ptr(), ffi::PyBUF_FORMAT | ffi::PyBUF_STRIDES) != 0 {
            ffi::PyErr_Clear();
            return None;
        }
        let view = View(raw.assume_init());
        let v = &view.0;
        if v.ndim != 1 || v.shape.is_null() || v.strides.is_null() || !v.suboffsets.is_null() {
            return None;
        }
        let signed = native_int_format(v.format)?;
        let (n, stride, buf) = (*v.shape as usize, *v.strides, v.buf as *const u8);
        match (v.itemsize, signed) {
            (1, true) => read_items::<i8>(buf, n, stride),
            (1, false) => read_items::<u8>(buf, n, stride),
            (2, true) => read_items::<i16>(buf, n, stride),
            (2, false) => read_items::<u16>(buf, n, stride),
            (4, true) => read_items::<i32>(buf, n, stride),
            (4, false) => read_items::<u32>(buf, n, stride),
            (8, true) => read_items::<i64>(buf, n, stride),
            (8, false) => read_items::<u64>(buf, n, stride),
            _ => None,
        }
    }
}

/// For a buffer format that is one native integer (`struct` module codes, optionally after
/// `@`; a null format means unsigned bytes), whether it is signed; `None` for any other
/// format, including an explicit byte order.
///
/// # Safety
/// `format` is null or a NUL-terminated string.
unsafe fn native_int_format(format: *const std::os::raw::c_char) -> Option<bool> {
    if format.is_null() {
        return Some(false);
    }
    let f = std::ffi::CStr::from_ptr(format).to_bytes();
    let f = f.strip_prefix(b"@").unwrap_or(f);
    match f {
        [b'b' | b'h' | b'i' | b'l' | b'q' | b'n'] => Some(true),
        [b'B' | b'H' | b'I' | b'L' | b'Q' | b'N'] => Some(false),
        _ => None,
    }
}

/// An integer item of an array, as a token id.
trait IdItem: Copy {
    /// Whether the item is a token id (not negative, at most `u32::MAX`), and the id.
    fn id(self) -> (bool, Rank);
}

macro_rules! id_items {
    (signed: $($s:ty),*; unsigned: $($u:ty),*) => {
        $(impl IdItem for $s {
            #[inline(always)]
            fn id(self) -> (bool, Rank) {
                (self >= 0 && self as i64 <= Rank::MAX as i64, self as Rank)
            }
        })*
        $(impl IdItem for $u {
            #[inline(always)]
            fn id(self) -> (bool, Rank) {
                (self as u64 <= Rank::MAX as u64, self as Rank)
            }
        })*
    };
}

id_items!(signed: i8, i16, i32, i64; unsigned: u8, u16, u32, u64);

/// Reads `n` items of type `T` every `stride` bytes from `buf`; `None` if one is no token
/// id. One pass with no early exit, so that a contiguous array is read at memory speed.
///
/// # Safety
/// `n` items of `T` lie at `buf + i * stride`, maybe unaligned.
unsafe fn read_items<T: IdItem>(buf: *const u8, n: usize, stride: isize) -> Option<Vec<Rank>> {
    let mut ids = Vec::with_capacity(n);
    let mut fits = true;
    for i in 0..n {
        let (ok, id) = std::ptr::read_unaligned(buf.offset(i as isize * stride) as *const T).id();
        fits &= ok;
        ids.push(id);
    }
    fits.then_some(ids)
}
