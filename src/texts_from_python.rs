//! Texts read out of the Python strs that encoding is given: a str's characters in place
//! ([`storage`]), and a batch's list of strs ([`BatchTexts`]).
//!
//! A batch's calling thread goes over the whole list before the pool can start, with the
//! GIL held, so whatever it does per text is work no other thread can share. For a batch
//! of many short texts that was a large part of the call: taken as an argument
//! `Vec<Bound<PyString>>` (PyO3's extraction goes through the list's iterator and a
//! conversion per item), then asked one by one where its characters are stored (24 bytes
//! a text, into new memory, faulted in page by page), a line of the benchmark's text cost
//! this thread about 30 ns against about 600 for encoding it. Now this thread only takes
//! a reference to each str and reads its length as it goes (into 8 bytes a text, and the
//! bundles the pool will claim); the thread that encodes a text reads where its
//! characters are stored ([`TextsView::storage`]).

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use crate::batch::Bundler;
use crate::prefetch::prefetch;
use crate::str_storage::Storage;

/// A str's characters as CPython stores them, read in place.
pub(crate) fn storage<'a>(text: &'a Bound<'_, PyString>) -> PyResult<Storage<'a>> {
    make_ready(text)?;
    // SAFETY: a ready str, which lives as long as `text` is borrowed.
    Ok(unsafe { read_storage(text.as_ptr()) })
}

/// Brings a str made through CPython's legacy API into the form [`read_storage`] reads
/// (before Python 3.12: from then on every str is in that form).
fn make_ready(text: &Bound<'_, PyString>) -> PyResult<()> {
    #[cfg(not(Py_3_12))]
    #[allow(deprecated)]
    // SAFETY: a str, with the GIL held.
    unsafe {
        if ffi::PyUnicode_READY(text.as_ptr()) != 0 {
            return Err(PyErr::fetch(text.py()));
        }
    }
    let _ = text;
    Ok(())
}

/// Where the characters of the str `p` are stored, read from its header alone: its
/// length, width and data never change once it is ready, so any thread may read them.
/// (The width and the ASCII flag share a word of the header with the `interned` bits,
/// which `sys.intern` may set meanwhile from a thread holding the GIL: strictly a race on
/// that word, though the bits read here are never among those written, and an aligned
/// word's load on the platforms built for sees the word before or after the write.)
///
/// # Safety
/// `p` must be a ready str (see [`make_ready`]) that outlives `'a`.
unsafe fn read_storage<'a>(p: *mut ffi::PyObject) -> Storage<'a> {
    let len = ffi::PyUnicode_GET_LENGTH(p) as usize;
    let data = ffi::PyUnicode_DATA(p);
    match ffi::PyUnicode_KIND(p) {
        ffi::PyUnicode_1BYTE_KIND if marked_ascii(p) => Storage::Ascii(std::slice::from_raw_parts(data as *const u8, len)),
        ffi::PyUnicode_1BYTE_KIND => Storage::Latin1(std::slice::from_raw_parts(data as *const u8, len)),
        ffi::PyUnicode_2BYTE_KIND => Storage::Ucs2(std::slice::from_raw_parts(data as *const u16, len)),
        _ => Storage::Ucs4(std::slice::from_raw_parts(data as *const u32, len)),
    }
}

/// Whether CPython marked the str `p` as pure ASCII (false where its headers give no way
/// to ask: the text is then scanned instead).
///
/// # Safety
/// `p` must be a str.
pub(crate) unsafe fn marked_ascii(p: *mut ffi::PyObject) -> bool {
    #[cfg(not(Py_3_14))]
    return ffi::PyUnicode_IS_ASCII(p) != 0;
    #[cfg(Py_3_14)]
    {
        let _ = p;
        false
    }
}

/// A batch's texts are claimed by its threads a bundle at a time: consecutive texts of
/// together at least this many characters (or [`BUNDLE_TEXTS`] texts). Claimed one at a
/// time, a batch of many short lines kept its 16 threads busy taking turns at the one
/// counter that hands them out: more threads made it slower (see PERFORMANCE.md).
const BUNDLE_CHARS: usize = 4096;
const BUNDLE_TEXTS: usize = 64;

/// The strs of a batch, each held by a reference of its own (the list may change once the
/// GIL is released: another Python thread could empty it), and the bundles the batch's
/// threads claim them in ([`Bundler`], by length in characters).
pub(crate) struct BatchTexts<'py> {
    py: Python<'py>,
    /// Owned references to ready strs.
    texts: Vec<*mut ffi::PyObject>,
    chars: usize,
    bundles: Vec<std::ops::Range<usize>>,
}

impl<'py> BatchTexts<'py> {
    /// The texts of `list`, which must hold only strs (subclasses too): a `TypeError`
    /// otherwise (tokenmill's Python layer then names the first item that is not one).
    pub(crate) fn of_list(list: &Bound<'py, PyList>) -> PyResult<Self> {
        let py = list.py();
        // Without a GIL (CPython's free-threaded build) another thread may change the list
        // during the pass: its items are read from a tuple made of them (under the list's
        // own lock), which nothing can change.
        #[cfg(Py_GIL_DISABLED)]
        // SAFETY: a list, and a new reference to the tuple made of it.
        let list = &unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_AsTuple(list.as_ptr()))? };
        #[cfg(Py_GIL_DISABLED)]
        let get = ffi::PyTuple_GET_ITEM;
        #[cfg(not(Py_GIL_DISABLED))]
        let get = ffi::PyList_GET_ITEM;
        let items = list.as_ptr();
        // SAFETY: a list or a tuple, whose size is its `ob_size`.
        let n = unsafe { ffi::Py_SIZE(items) } as usize;
        let mut batch = BatchTexts { py, texts: Vec::with_capacity(n), chars: 0, bundles: Vec::new() };
        let mut bundler = Bundler::new(BUNDLE_CHARS, BUNDLE_TEXTS);
        // (each str's header is read and written here, its one cache miss: asked for some
        // items ahead, so that the misses overlap)
        const AHEAD: usize = 8;
        for i in 0..n {
            // SAFETY: indices below the length of the list (or tuple), which cannot change
            // during this loop: it holds the GIL and runs no Python code (nothing here can
            // call any: a type check, a reference count, a read of a str's header, and
            // before Python 3.12 `PyUnicode_READY`, which at most converts the str's own
            // storage); in the free-threaded build, a tuple's items never change.
            unsafe {
                if i + AHEAD < n {
                    prefetch(get(items, (i + AHEAD) as ffi::Py_ssize_t));
                }
                let item = get(items, i as ffi::Py_ssize_t);
                if ffi::PyUnicode_Check(item) == 0 {
                    return Err(pyo3::exceptions::PyTypeError::new_err("expected a list of str"));
                }
                let text = Bound::from_borrowed_ptr(py, item).cast_into_unchecked::<PyString>();
                make_ready(&text)?;
                let chars = ffi::PyUnicode_GET_LENGTH(item) as usize;
                batch.chars += chars;
                bundler.add(chars);
                // (the reference goes to `texts`, which `drop` gives back)
                batch.texts.push(text.into_ptr());
            }
        }
        batch.bundles = bundler.finish();
        Ok(batch)
    }

    /// The texts, for the threads that encode them.
    pub(crate) fn view(&self) -> TextsView<'_> {
        TextsView(&self.texts)
    }

    /// The bundles, in order, covering every text.
    pub(crate) fn bundles(&self) -> &[std::ops::Range<usize>] {
        &self.bundles
    }

    /// Text `i`'s str (for its error).
    pub(crate) fn text(&self, i: usize) -> Bound<'py, PyString> {
        // SAFETY: a str the batch holds a reference to.
        unsafe { Bound::from_borrowed_ptr(self.py, self.texts[i]).cast_into_unchecked::<PyString>() }
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// The characters of all the texts together.
    pub(crate) fn chars(&self) -> usize {
        self.chars
    }
}

impl Drop for BatchTexts<'_> {
    fn drop(&mut self) {
        // SAFETY: each is a reference this batch owns, given back with the GIL held (a
        // `BatchTexts` stays on the thread that made it, which holds the GIL for `'py`).
        // (their headers are out of the caches again by now: asked for ahead)
        const AHEAD: usize = 8;
        for (i, &p) in self.texts.iter().enumerate() {
            if let Some(&ahead) = self.texts.get(i + AHEAD) {
                prefetch(ahead);
            }
            unsafe { ffi::Py_DECREF(p) };
        }
    }
}

/// A batch's texts as any thread may read them, the GIL held or not: only where each
/// str's characters are stored, which does not change while the batch holds the str.
#[derive(Clone, Copy)]
pub(crate) struct TextsView<'a>(&'a [*mut ffi::PyObject]);

// SAFETY: the view only reads the headers and characters of ready strs, which never
// change, and the batch it borrows keeps them alive.
unsafe impl Send for TextsView<'_> {}
unsafe impl Sync for TextsView<'_> {}

impl<'a> TextsView<'a> {
    /// Where text `i`'s characters are stored.
    #[inline]
    pub(crate) fn storage(self, i: usize) -> Storage<'a> {
        // SAFETY: a ready str, alive as long as the batch this view borrows.
        unsafe { read_storage(self.0[i]) }
    }
}
