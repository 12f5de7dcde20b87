//! The Python extension `tokenmill._core`: thin PyO3 wrappers over the engine. Every call
//! that does real work releases the GIL (encoding a text shorter than `KEEP_GIL_BELOW`
//! characters is not real work: releasing the GIL would cost a tenth of the call; a
//! decoding batch on one thread releases it after holding it for `GIL_HOLD`).
//! Engine errors become Python exceptions in exactly one place, [`to_py_err`].

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyUnicodeEncodeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rustc_hash::FxHashSet;

use crate::batch;
use crate::encoder::Encoder;
use crate::error::{Error, Rank};
use crate::ids_from_python::{ids_from, ids_in_place, note_array_types};
use crate::span_counts::SpanCounts;
use crate::special::{SpecialPolicy, SpecialSet};
use crate::str_storage::{Storage, Unencodable, PARALLEL_ABOVE};
use crate::shared_ints::put_ints;
use crate::texts_from_python::{marked_ascii, storage, BatchTexts};
use crate::trainer;

/// The one mapping from engine errors to Python exceptions.
fn to_py_err(py: Python<'_>, e: Error) -> PyErr {
    match e {
        Error::DisallowedSpecial(token) => {
            let repr = PyString::new(py, &token)
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| format!("{token:?}"));
            PyValueError::new_err(format!(
                "Encountered text corresponding to disallowed special token {repr}.\n\
                 To encode it as the special token, pass it in `allowed_special` (e.g. `allowed_special={{{repr}}}` or `\"all\"`).\n\
                 To encode it as ordinary text, leave it out of `disallowed_special` \
                 (e.g. `disallowed_special=enc.special_tokens_set - {{{repr}}}`), \
                 or pass `disallowed_special=()` to turn the check off for every special token."
            ))
        }
        Error::UnknownToken(bytes) => PyKeyError::new_err(PyBytes::new(py, &bytes).unbind()),
        Error::UnknownTokenId(id) => PyKeyError::new_err(format!("Invalid token for decoding: {id}")),
        Error::ThreadPool(_) | Error::Cancelled => PyRuntimeError::new_err(e.to_string()),
        Error::InvalidPattern { .. }
        | Error::InvalidVocabulary(_)
        | Error::RegexRuntime(_)
        | Error::UnencodableBytes(_)
        | Error::PieceTooLong(_)
        | Error::CorpusTooLarge(_) => PyValueError::new_err(e.to_string()),
    }
}

/// `disallowed_special` as given, or none (an empty tuple) where a call leaves it out, as
/// tiktoken's own engine calls do.
fn none_disallowed<'py>(py: Python<'py>, disallowed: Option<&Bound<'py, PyAny>>) -> Bound<'py, PyAny> {
    disallowed.cloned().unwrap_or_else(|| PyTuple::empty(py).into_any())
}

/// Resolves tiktoken's `allowed_special` / `disallowed_special` arguments.
fn parse_policy(enc: &Encoder, allowed: &Bound<'_, PyAny>, disallowed: &Bound<'_, PyAny>) -> PyResult<SpecialPolicy> {
    let specials = enc.vocab().special_tokens();
    let allowed = if let Ok(s) = allowed.cast::<PyString>() {
        if s.to_str()? != "all" {
            return Err(PyTypeError::new_err("allowed_special must be \"all\" or a set of strings"));
        }
        SpecialSet::All
    } else {
        let mut ids = FxHashSet::default();
        for item in allowed.try_iter()? {
            let item = item?;
            let s = item.cast::<PyString>().map_err(|_| PyTypeError::new_err("allowed_special must contain strings"))?;
            if let Some(&id) = specials.get(s.to_str()?) {
                ids.insert(id);
            }
        }
        if ids.is_empty() { SpecialSet::Nothing } else { SpecialSet::Ids(ids) }
    };
    let mut extra = Vec::new();
    let disallowed = if let Ok(s) = disallowed.cast::<PyString>() {
        if s.to_str()? != "all" {
            return Err(PyTypeError::new_err("disallowed_special must be \"all\" or a collection of strings"));
        }
        SpecialSet::AllButAllowed
    } else {
        let mut ids = FxHashSet::default();
        for item in disallowed.try_iter()? {
            let item = item?;
            let s = item.cast::<PyString>().map_err(|_| PyTypeError::new_err("disallowed_special must contain strings"))?;
            let s = s.to_str()?;
            match specials.get(s) {
                Some(&id) => {
                    ids.insert(id);
                }
                None => extra.push(s.to_string()),
            }
        }
        if ids.is_empty() { SpecialSet::Nothing } else { SpecialSet::Ids(ids) }
    };
    Ok(SpecialPolicy { allowed, disallowed, extra_disallowed: extra })
}

/// `tokens` as a Python list of ints, the ints shared by every list
/// ([`crate::shared_ints`]).
///
/// The list is filled through the C API directly (its item array, each place once): with
/// PyO3's list-from-iterator, building the lists cost about 1.4 times as much (cl100k,
/// warm 20 MB stream: whole calls 1.06x faster, the same engine's bytes output as the
/// control). The item array is allocated unzeroed and filled before the list is made
/// around it ([`list_taking`]): `PyList_New(n)` zeroes its places first (`calloc`), a
/// second pass over memory that is mostly being touched for the first time.
fn list_of_ids<'py>(py: Python<'py>, enc: &Encoder, tokens: &[Rank]) -> PyResult<Bound<'py, PyList>> {
    let n = tokens.len();
    #[cfg(not(Py_GIL_DISABLED))]
    if n > 0 {
        // SAFETY: the array belongs to this call until `list_taking` hands it to the list;
        // `put_ints` writes its `n` places (or, on an error, the first `done`, then
        // released).
        unsafe {
            let items = ffi::PyMem_Malloc(n * std::mem::size_of::<*mut ffi::PyObject>()) as *mut *mut ffi::PyObject;
            if items.is_null() {
                return Err(pyo3::exceptions::PyMemoryError::new_err("no memory for the list of token ids"));
            }
            if let Err((done, e)) = put_ints(py, enc, n, |i| *tokens.get_unchecked(i), items) {
                release_items(items, done);
                return Err(e);
            }
            return list_taking(py, items, n);
        }
    }
    // SAFETY: a new list of `n` places, all NULL, is filled in order, each place once,
    // before anything else sees the list; on an error the places not filled are still
    // NULL, which list deallocation skips.
    unsafe {
        let list = ffi::PyList_New(n as ffi::Py_ssize_t);
        if list.is_null() {
            return Err(PyErr::fetch(py));
        }
        let list = Bound::from_owned_ptr(py, list).cast_into_unchecked::<PyList>();
        let items = (*(list.as_ptr() as *mut ffi::PyListObject)).ob_item;
        put_ints(py, enc, n, |i| *tokens.get_unchecked(i), items).map_err(|(_, e)| e)?;
        Ok(list)
    }
}

/// Drops the references in `items[0..done]` and frees the array (`PyMem_Malloc`'s).
///
/// # Safety
/// `items` must come from `PyMem_Malloc`, its first `done` places hold owned references,
/// and nothing else may use it afterwards; the GIL held.
#[cfg(not(Py_GIL_DISABLED))]
unsafe fn release_items(items: *mut *mut ffi::PyObject, done: usize) {
    for k in 0..done {
        ffi::Py_DECREF(*items.add(k));
    }
    ffi::PyMem_Free(items as *mut std::ffi::c_void);
}

/// A new list whose items are the `n` owned references in `items`, an array of at least
/// `max(n, 1)` places from `PyMem_Malloc`, which the list takes over as if it had grown
/// it itself. On an error the references and the array are released.
///
/// Not in CPython's free-threaded build, whose lists keep their items in blocks with a
/// header.
///
/// # Safety
/// As for [`release_items`], with `done` = `n`.
#[cfg(not(Py_GIL_DISABLED))]
unsafe fn list_taking<'py>(py: Python<'py>, items: *mut *mut ffi::PyObject, n: usize) -> PyResult<Bound<'py, PyList>> {
    // (a new list may start a garbage collection: nothing sees `items` until it is set)
    let list = ffi::PyList_New(0);
    if list.is_null() {
        let e = PyErr::fetch(py);
        release_items(items, n);
        return Err(e);
    }
    let lp = list as *mut ffi::PyListObject;
    (*lp).ob_item = items;
    (*lp).allocated = n.max(1) as ffi::Py_ssize_t;
    (*lp).ob_base.ob_size = n as ffi::Py_ssize_t;
    Ok(Bound::from_owned_ptr(py, list).cast_into_unchecked::<PyList>())
}

/// Texts of at least this many bytes of UTF-8 (128 KiB) are encoded with
/// [`encode_into_list`]; shorter ones into a vector of ids first.
const DIRECT_LIST_FROM: usize = 1 << 17;
/// How many ids the engine gathers before writing them into the list.
const DRAIN_EVERY: usize = 4096;

/// The ids of `text` (under `policy`, or as ordinary text with `None`) as a new list.
fn encode_list<'py>(py: Python<'py>, enc: &Encoder, text: &Bound<'py, PyString>, policy: Option<&SpecialPolicy>) -> PyResult<Bound<'py, PyList>> {
    #[cfg(not(Py_GIL_DISABLED))]
    if let Some(bytes) = long_text_bytes(text)? {
        if let Some(list) = encode_into_list(py, enc, text, policy, bytes)? {
            return Ok(list);
        }
    }
    let tokens = with_text(py, text, |t| match policy {
        Some(p) => enc.encode(t, p),
        None => enc.encode_ordinary(t),
    })?
    .map_err(|e| to_py_err(py, e))?;
    list_of_ids(py, enc, &tokens)
}

/// The bytes of UTF-8 of `text` when they are at least [`DIRECT_LIST_FROM`] (a text whose
/// ids go straight into the object returned), `None` for a shorter text.
fn long_text_bytes(text: &Bound<'_, PyString>) -> PyResult<Option<usize>> {
    // (where CPython's headers give no ASCII test, a Latin-1 text long enough to matter
    // is counted)
    // SAFETY: `text` is a str.
    let ascii = unsafe { marked_ascii(text.as_ptr()) };
    // SAFETY: `text` is a str (these read its header).
    let (kind, chars) = unsafe {
        let p = text.as_ptr();
        (ffi::PyUnicode_KIND(p), ffi::PyUnicode_GET_LENGTH(p) as usize)
    };
    // The most bytes of UTF-8 a character stored this wide can take.
    let widest = if ascii { 1 } else { (kind as usize + 1).min(4) };
    // (counted exactly only when it may reach the threshold)
    let bytes = if widest == 1 || chars.saturating_mul(widest) < DIRECT_LIST_FROM { chars } else { storage(text)?.utf8_len() };
    Ok((bytes >= DIRECT_LIST_FROM).then_some(bytes))
}

/// Room for the ids of a text of `bytes` of UTF-8 in the object it is encoded into: three
/// ids per four bytes, more than real text needs (about one per three to four bytes) and
/// than random letters and punctuation without whitespace (0.71-0.72 with cl100k and
/// o200k). A text with more ids (one per byte at most) grows the object once, at the end.
fn first_room(bytes: usize) -> usize {
    bytes / 4 * 3 + 64
}

/// A raw pointer the engine may write through with the GIL released.
struct Places<T>(*mut T);
// SAFETY: the places are in memory nothing else can reach until the writes are over
// (see `encode_into_places`), and only the thread that encodes writes through it.
unsafe impl<T> Send for Places<T> {}
unsafe impl<T> Sync for Places<T> {}

/// Encodes `text` (under `policy`, or as ordinary text with `None`) with the GIL released,
/// writing its first `room` ids into `places`, each as `place(id)`. Returns how many were
/// written there and the ids past them (the ids' first room is [`first_room`], so
/// there are rarely any).
///
/// # Safety
/// `places` must be valid for writes of `room` values and reachable by nothing else until
/// this returns.
unsafe fn encode_into_places<T>(py: Python<'_>, enc: &Encoder, text: &Bound<'_, PyString>, policy: Option<&SpecialPolicy>, places: *mut T, room: usize, place: impl Fn(Rank) -> T + Sync) -> PyResult<(usize, Vec<Rank>)> {
    let places = Places(places);
    let mut written = 0usize;
    let mut beyond: Vec<Rank> = Vec::new();
    let watch = SignalWatch::for_text(py, text);
    let encoded = with_text(py, text, |t| {
        let places = &places;
        enc.encode_draining(t, policy, DRAIN_EVERY, |ids| {
            let fit = ids.len().min(room - written);
            // (as a slice of its own: written through the raw pointer, the places might
            // have been `written` or `place`'s table for all the compiler knew, and both
            // were read again for every id)
            // SAFETY: places `written..written + fit` are within `room`, and reachable by
            // nothing else (see above).
            let to = std::slice::from_raw_parts_mut(places.0.add(written), fit);
            fill_places(to, &ids[..fit], &place);
            written += fit;
            beyond.extend_from_slice(&ids[fit..]);
            watch.check().is_err()
        })
    })?;
    encoded.map_err(|e| watch.into_py_err(py, e))?;
    Ok((written, beyond))
}

/// `to[k] = place(ids[k])` for every `k` (`to` as long as `ids`).
#[inline(never)]
fn fill_places<T>(to: &mut [T], ids: &[Rank], place: &impl Fn(Rank) -> T) {
    for (to, &id) in to.iter_mut().zip(ids) {
        *to = place(id);
    }
}

/// Encodes a long text (`bytes` of UTF-8) straight into the item array of the list it
/// returns, so that its ids need no array of their own: for 1 MB of text without
/// whitespace (723k ids), 2.9 MB less memory and, in a process that has not encoded
/// before, about 950 fewer page faults. The array is allocated as CPython allocates a
/// list's items (`PyMem_Malloc`, not zeroed) with [`first_room`]; the engine, with the
/// GIL released, writes each id's int into it where the ints are laid out
/// ([`crate::shared_ints::IntPlaces`]), else the ids as plain integers, each then replaced
/// by its int in place (any id past the room waits in a vector); the array, cut to size,
/// is handed to a new empty list, as the list would grow its own. `None` when the room
/// cannot be had (the caller then encodes the usual way).
///
/// Not in CPython's free-threaded build, whose lists keep their items in blocks with a
/// header.
#[cfg(not(Py_GIL_DISABLED))]
fn encode_into_list<'py>(py: Python<'py>, enc: &Encoder, text: &Bound<'py, PyString>, policy: Option<&SpecialPolicy>, bytes: usize) -> PyResult<Option<Bound<'py, PyList>>> {
    const PLACE: usize = std::mem::size_of::<*mut ffi::PyObject>();
    let room = first_room(bytes);
    // SAFETY: the array belongs to this call until it is handed to the list; the engine
    // writes at most `room` places into it; from `put_ints` on, places `0..done` hold
    // owned references (dropped on an error) and the rest plain ids.
    unsafe {
        let mut items = ffi::PyMem_Malloc(room * PLACE) as *mut *mut ffi::PyObject;
        if items.is_null() {
            return Ok(None);
        }
        let fail = |items: *mut *mut ffi::PyObject, done: usize, e: PyErr| {
            release_items(items, done);
            Err(e)
        };
        // With the ints laid out, the engine writes each id's int itself; else its id,
        // made into its int below.
        let places = crate::shared_ints::int_places(enc);
        let drained = match places {
            Some(p) => encode_into_places(py, enc, text, policy, items as *mut usize, room, |id| p.get(id) as usize),
            None => encode_into_places(py, enc, text, policy, items as *mut usize, room, |id| id as usize),
        };
        let (written, beyond) = match drained {
            Ok(drained) => drained,
            Err(e) => return fail(items, 0, e),
        };
        let n = written + beyond.len();
        if n != room {
            // Grown to take the ids past the room, or cut down to the ids' number.
            let resized = ffi::PyMem_Realloc(items as *mut std::ffi::c_void, n.max(1) * PLACE) as *mut *mut ffi::PyObject;
            if resized.is_null() {
                return fail(items, 0, pyo3::exceptions::PyMemoryError::new_err("no memory for the list of token ids"));
            }
            items = resized;
            for (k, &id) in beyond.iter().enumerate() {
                *(items as *mut usize).add(written + k) = places.map_or(id as usize, |p| p.get(id) as usize);
            }
        }
        drop(beyond);
        if places.is_none() {
            if let Err((done, e)) = put_ints(py, enc, n, |i| *(items as *const usize).add(i) as Rank, items) {
                return fail(items, done, e);
            }
        }
        list_taking(py, items, n).map(Some)
    }
}

/// Encodes a long text (`bytes` of UTF-8) straight into the `bytes` object it returns
/// (the ids as native-endian uint32, for `encode_to_numpy`), so that its ids need no
/// vector of their own and are not copied: CPython's bytes writer starts with
/// [`first_room`], the engine writes the ids into it with the GIL released (any past its
/// room wait in a vector), and the object is cut or grown to the ids' size.
fn encode_into_bytes<'py>(py: Python<'py>, enc: &Encoder, text: &Bound<'py, PyString>, policy: Option<&SpecialPolicy>, bytes: usize) -> PyResult<Bound<'py, PyBytes>> {
    use ffi::compat::{PyBytesWriter_Create, PyBytesWriter_Discard, PyBytesWriter_FinishWithSize, PyBytesWriter_GetData, PyBytesWriter_Resize};
    const ID: usize = std::mem::size_of::<Rank>();
    let room = first_room(bytes);
    // SAFETY: the writer belongs to this call until it is finished or discarded; the
    // engine writes at most `room` ids into its `room * ID` bytes.
    unsafe {
        let writer = PyBytesWriter_Create((room * ID) as ffi::Py_ssize_t);
        if writer.is_null() {
            return Err(PyErr::fetch(py));
        }
        let (written, beyond) = match encode_into_places(py, enc, text, policy, PyBytesWriter_GetData(writer) as *mut Rank, room, |id| id) {
            Ok(drained) => drained,
            Err(e) => {
                PyBytesWriter_Discard(writer);
                return Err(e);
            }
        };
        let n = written + beyond.len();
        if !beyond.is_empty() {
            if PyBytesWriter_Resize(writer, (n * ID) as ffi::Py_ssize_t) < 0 {
                let e = PyErr::fetch(py);
                PyBytesWriter_Discard(writer);
                return Err(e);
            }
            let data = PyBytesWriter_GetData(writer) as *mut Rank;
            std::ptr::copy_nonoverlapping(beyond.as_ptr(), data.add(written), beyond.len());
        }
        let obj = PyBytesWriter_FinishWithSize(writer, (n * ID) as ffi::Py_ssize_t);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked::<PyBytes>())
    }
}

/// CPython's own `UnicodeEncodeError` for a str holding a lone surrogate (its message and
/// positions, as tiktoken's callers see them).
fn unencodable(text: &Bound<'_, PyString>, Unencodable(at): Unencodable) -> PyErr {
    match text.to_str() {
        Err(e) => e,
        Ok(_) => PyUnicodeEncodeError::new_err(("utf-8", text.clone().unbind(), at, at + 1, "surrogates not allowed")),
    }
}

/// Runs `f` on `text` as UTF-8, with the GIL released unless the text is shorter than
/// [`KEEP_GIL_BELOW`] characters. The text is converted here (see `str_storage`), so the
/// str does not keep a UTF-8 copy of itself afterwards, as it does when CPython converts
/// it.
fn with_text<R: Send>(py: Python<'_>, text: &Bound<'_, PyString>, f: impl FnOnce(&str) -> R + Send) -> PyResult<R> {
    let chars = storage(text)?;
    if chars.chars() < KEEP_GIL_BELOW {
        return chars.with_utf8(f).map_err(|e| unencodable(text, e));
    }
    py.detach(|| chars.with_utf8(f)).map_err(|e| unencodable(text, e))
}

/// Texts shorter than this (in characters) are encoded with the GIL held: releasing and
/// taking it back costs about 25 ns, a tenth of a call on a 41-character line (282 to 253
/// ns a call, `timeit`, cl100k), while encoding such a text holds the GIL for at most a
/// few microseconds (CPython hands it over every 5 ms).
const KEEP_GIL_BELOW: usize = 256;

/// `text` as UTF-8: borrowed when it is ASCII, else converted here (see [`with_text`]).
fn text_utf8<'a>(text: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    storage(text)?.to_cow().map_err(|e| unencodable(text, e))
}

/// Runs of results handed from a batch's pool threads to its calling thread, which alone
/// makes them into Python objects. Each pool thread owns a sender, so once all are done,
/// even by a panic, the channel closes.
struct Handover<T> {
    /// A receiver is not `Sync`, and this one is waited on with the GIL released; only the
    /// calling thread ever locks it.
    rx: Mutex<std::sync::mpsc::Receiver<T>>,
}

impl<T: Send> Handover<T> {
    /// The handover, and one sender for each of `helpers` pool threads.
    fn new(helpers: usize) -> (Self, Vec<std::sync::mpsc::Sender<T>>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let senders = (0..helpers).map(|_| tx.clone()).collect();
        (Self { rx: Mutex::new(rx) }, senders)
    }

    /// The next run: one already sent, or with `wait`, the next one sent (waiting with the
    /// GIL released); `None` when there is none and, with `wait`, every sender is gone.
    fn next(&self, py: Python<'_>, wait: bool) -> Option<T> {
        let rx = || self.rx.lock().unwrap_or_else(|e| e.into_inner());
        if wait { py.detach(|| rx().recv().ok()) } else { rx().try_recv().ok() }
    }

    /// Runs `helper` on the pool with each sender while `this_thread` runs here. However
    /// `this_thread` ends (done, failed or panicked), `stop` makes the helpers stop at
    /// their next item and this thread takes what they still send until all are gone,
    /// with the GIL released (a helper may be queued behind another call's, which waits
    /// for its own caller to take the GIL); then a panic goes on here.
    fn run<R>(&self, py: Python<'_>, senders: Vec<std::sync::mpsc::Sender<T>>, helper: impl Fn(std::sync::mpsc::Sender<T>) + Sync + Send, this_thread: impl FnOnce() -> PyResult<R>, stop: impl FnOnce()) -> PyResult<R> {
        batch::with_helpers(senders, helper, || {
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(this_thread));
            stop();
            while self.next(py, true).is_some() {}
            done.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
        .map_err(|e| to_py_err(py, e))?
    }
}

/// Decodes `lists` on this thread alone (a decoding batch on one thread, a small one, or
/// what follows a list its pool threads cannot read) and makes each one's bytes into an
/// object with `make`, appended to `made`, in order.
///
/// In chunks of about [`RUN_IDS`] ids: a chunk's lists are read (their ids copied back to
/// back), decoded into one buffer, then made. A chunk is decoded with the GIL released
/// when it holds [`DECODE_WINDOW`] ids or more (a long list), or when the GIL has been
/// held for [`GIL_HOLD`]: a thread waiting for the GIL asks for it only after a switch
/// interval without any release, and gets it at the next release. (Released at every
/// chunk, or list by list as before, the GIL was released too often and too briefly:
/// each release restarts the waiting thread's timeout, and this thread takes the GIL back
/// before the waiter wakes.) Errors come in the lists' order: a list that cannot be read
/// raises once the lists before it are made.
fn decode_on_this_thread<O>(py: Python<'_>, enc: &Encoder, lists: &[Bound<'_, PyAny>], made: &mut Vec<O>, make: &mut dyn FnMut(&[u8]) -> PyResult<O>) -> PyResult<()> {
    let vocab = enc.vocab();
    // The chunk's ids back to back and where each list ends; the same for its bytes.
    let (mut ids, mut id_ends, mut bytes, mut byte_ends) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut lists = lists.iter();
    let mut held_since = std::time::Instant::now();
    loop {
        // A signal (Ctrl-C) that arrived meanwhile, its handler run here: an exception it
        // raises (KeyboardInterrupt) ends the batch (once every RUN_IDS ids or so).
        py.check_signals()?;
        ids.clear();
        id_ends.clear();
        let mut unreadable = None;
        while ids.len() + LIST_COST * id_ends.len() < RUN_IDS {
            let Some(list) = lists.next() else { break };
            match ids_from("batch", list) {
                Ok(list) if ids.is_empty() && list.len() >= RUN_IDS => ids = list, // (not copied)
                Ok(list) => ids.extend_from_slice(&list),
                Err(e) => {
                    unreadable = Some(e);
                    break;
                }
            }
            id_ends.push(ids.len());
        }
        if id_ends.is_empty() && unreadable.is_none() {
            return Ok(());
        }
        // Decodes the chunk's lists until one fails (its error).
        let decode = |bytes: &mut Vec<u8>, byte_ends: &mut Vec<usize>| -> Option<Error> {
            bytes.clear();
            bytes.reserve(ids.len() * 4); // (as `Vocab::decode` sizes its output)
            byte_ends.clear();
            let mut start = 0;
            for &end in &id_ends {
                if let Err(e) = vocab.decode_into(&ids[start..end], bytes) {
                    return Some(e);
                }
                byte_ends.push(bytes.len());
                start = end;
            }
            None
        };
        let failed = if ids.len() < DECODE_WINDOW && held_since.elapsed() < GIL_HOLD {
            decode(&mut bytes, &mut byte_ends)
        } else {
            let failed = py.detach(|| decode(&mut bytes, &mut byte_ends));
            // (from when this thread has the GIL again: it may have waited for it)
            held_since = std::time::Instant::now();
            failed
        };
        let mut start = 0;
        for &end in &byte_ends {
            made.push(make(&bytes[start..end])?);
            start = end;
        }
        if let Some(e) = failed {
            return Err(to_py_err(py, e));
        }
        if let Some(e) = unreadable {
            return Err(e);
        }
    }
}

/// Decodes every list of ids in `batch` and makes each one's bytes into a Python object
/// with `make`, in order. The first list that fails, whether it is no list of ids, holds
/// an id that is no token, or cannot be made (a `str` of invalid UTF-8 under
/// `errors="strict"`), raises its error, as tiktoken's batch (a loop of single calls)
/// does. `make_runs_no_python`: `make` runs no Python code (see below).
///
/// Reading the ids and making the objects need the GIL, so only this thread can do them:
/// they were the part of a batch that did not run in parallel (a two-thread batch that
/// read all ids, then decoded them on the pool, then made all the strs, was no faster
/// than a loop of `decode`). Now `threads - 1` pool threads take lists in order and
/// decode each as soon as this thread has read its ids, while this thread makes the
/// objects of the lists decoded so far, reads on (at most [`DECODE_WINDOW`] ids ahead of
/// them, so that a batch's ids and bytes are never all in memory at once), and, when it
/// can do neither, decodes a run of lists itself with the GIL released.
///
/// The pool threads wait for this thread to read lists, so it must not run Python code
/// meanwhile: Python code could call a batch that queues behind them on the pool and
/// wait for it (a deadlock). So lists are read in place only ([`ids_in_place`]: exact
/// lists and tuples of exact ints, arrays of integers); from the first list that is
/// neither on, and for a `make` that may run Python code (a `str` with an error handler
/// of the user's), the batch goes on here alone, once the pool threads have nothing left
/// to wait for.
fn decode_batch_to<'py, O>(py: Python<'py>, enc: &Encoder, batch: &[Bound<'py, PyAny>], threads: usize, make_runs_no_python: bool, mut make: impl FnMut(&[u8]) -> PyResult<O>) -> PyResult<Vec<O>> {
    type Decoded = Result<Vec<u8>, Error>;
    let n = batch.len();
    let threads = threads.min(batch::available_cores()).min(n).max(1);
    // (before any pool thread waits on this one: it may run Python code)
    note_array_types(py);
    // Whether the lists hold fewer than SMALL_DECODE_BATCH ids (counting stops there).
    let small = || {
        let mut ids = 0;
        batch.iter().all(|b| {
            ids += b.len().unwrap_or(SMALL_DECODE_BATCH);
            ids < SMALL_DECODE_BATCH
        })
    };
    if threads <= 1 || !make_runs_no_python || small() {
        let mut made = Vec::with_capacity(n);
        decode_on_this_thread(py, enc, batch, &mut made, &mut make)?;
        return Ok(made);
    }
    let feed = batch::Feed::<Vec<Rank>>::new(n);
    // Takes and decodes lists into `into` until it holds about RUN_IDS ids, or until the
    // next list is not read yet (`true` then) or none is left (`false`).
    let decode_run = |into: &mut Vec<(usize, Decoded)>| {
        let mut done = 0;
        while done < RUN_IDS {
            match feed.take() {
                batch::Taken::Item(i, ids) => {
                    into.push((i, enc.decode_bytes(&ids)));
                    done += ids.len() + LIST_COST;
                }
                batch::Taken::NotYet => return true,
                batch::Taken::Done => return false,
            }
        }
        true
    };
    let (runs, senders) = Handover::<Vec<(usize, Decoded)>>::new(threads - 1);
    let helper = |tx: std::sync::mpsc::Sender<Vec<(usize, Decoded)>>| {
        let mut spins = 0u32;
        loop {
            let mut run = Vec::new();
            let more = decode_run(&mut run);
            if !run.is_empty() {
                spins = 0;
                let _ = tx.send(run); // the receiver outlives the helpers
            } else if !more {
                break;
            } else if spins < 64 {
                // Waiting for this thread to read more lists.
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    };
    let next_run = |wait: bool| runs.next(py, wait);
    let mut decoded: Vec<Option<Decoded>> = (0..n).map(|_| None).collect();
    let mut lens = Vec::with_capacity(n);
    let mut made = Vec::with_capacity(n);
    let this_thread = || -> PyResult<()> {
        // Ids read ahead of the objects made (each list counted LIST_COST ids more).
        let mut ahead = 0;
        let mut end = n;
        loop {
            while let Some(run) = next_run(false) {
                // (a signal's handler run here, as in `decode_on_this_thread`: once a run)
                py.check_signals()?;
                run.into_iter().for_each(|(i, r)| decoded[i] = Some(r));
            }
            while let Some(r) = decoded.get_mut(made.len()).and_then(Option::take) {
                ahead -= lens[made.len()];
                made.push(make(&r.map_err(|e| to_py_err(py, e))?)?);
            }
            if made.len() >= end {
                // The pool threads have handed out every list they took: the rest (from
                // a list that cannot be read in place) is this thread's.
                return decode_on_this_thread(py, enc, &batch[end..], &mut made, &mut make);
            }
            if lens.len() < end && ahead < DECODE_WINDOW {
                match ids_in_place(&batch[lens.len()]) {
                    Some(ids) => {
                        ahead += ids.len() + LIST_COST;
                        lens.push(ids.len() + LIST_COST);
                        feed.push(ids);
                    }
                    None => {
                        end = lens.len();
                        feed.close(end);
                    }
                }
                continue;
            }
            let mut own = Vec::new();
            py.detach(|| decode_run(&mut own));
            if !own.is_empty() {
                py.check_signals()?;
                own.into_iter().for_each(|(i, r)| decoded[i] = Some(r));
                continue;
            }
            // Every list read is taken: the helpers' runs.
            match next_run(true) {
                Some(run) => run.into_iter().for_each(|(i, r)| decoded[i] = Some(r)),
                // Every helper is gone with a list still missing: one panicked (its panic
                // is raised when the helpers are joined).
                None => return Err(PyRuntimeError::new_err("a decoding thread failed")),
            }
        }
    };
    runs.run(py, senders, helper, this_thread, || feed.close(0))?;
    Ok(made)
}

/// The name of a codec error handler as CPython takes it (a NUL inside is refused, as
/// `bytes.decode` refuses it).
fn errors_name(errors: &str) -> PyResult<std::ffi::CString> {
    std::ffi::CString::new(errors).map_err(|_| PyValueError::new_err("embedded null character"))
}

/// `bytes.decode("utf-8", errors)`, straight from Rust's bytes (CPython's own decoder, so
/// the same result and the same errors).
fn str_from_utf8<'py>(py: Python<'py>, bytes: &[u8], errors: &std::ffi::CStr) -> PyResult<Bound<'py, PyString>> {
    // SAFETY: the pointers are valid for the call (`bytes` for its length, `errors` NUL-
    // terminated); the result is a new reference to a str, or NULL with an exception set.
    unsafe {
        let s = ffi::PyUnicode_DecodeUTF8(bytes.as_ptr().cast(), bytes.len() as ffi::Py_ssize_t, errors.as_ptr());
        Ok(Bound::from_owned_ptr_or_err(py, s)?.cast_into_unchecked::<PyString>())
    }
}

/// Encoded texts of a batch, handed over as one: their ids back to back, and per text its
/// index in the batch and where its ids are (or why it failed). A thread sends these in
/// runs, not a text at a time, so that many short texts do not each cost an allocation,
/// a message and a free on the other thread.
#[derive(Default)]
struct Encoded {
    ids: Vec<Rank>,
    texts: Vec<(usize, Result<std::ops::Range<usize>, Failure>)>,
}

/// Why a text of a batch has no ids.
enum Failure {
    Engine(Error),
    /// The str holds a lone surrogate (no UTF-8).
    Unencodable(Unencodable),
}

impl Failure {
    /// The exception for `text`'s failure.
    fn into_py_err(self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyErr {
        match self {
            Failure::Engine(e) => to_py_err(py, e),
            Failure::Unencodable(at) => unencodable(text, at),
        }
    }
}

/// Encodes a batch's `text` on `threads` threads (see [`Encoder::encode_in_batch`]),
/// appending its ids to `ids`. It is converted to UTF-8 here, in this thread's buffer; a
/// text long enough to be cut into chunks for all threads is converted on all of them.
/// `watch` is asked now and then while a long text is encoded (before each chunk, or
/// every few thousand ids; a signal handler's exception ends it with [`Error::Cancelled`]).
fn encode_stored(enc: &Encoder, text: Storage<'_>, policy: Option<&SpecialPolicy>, threads: usize, ids: &mut Vec<Rank>, watch: &SignalWatch) -> Result<(), Failure> {
    let stop = || watch.check();
    let encoded = if threads > 1 && text.chars() >= PARALLEL_ABOVE {
        text.to_cow_on(threads).map(|utf8| enc.encode_in_batch(&utf8, policy, threads, ids, &stop))
    } else {
        text.with_utf8(|utf8| enc.encode_in_batch(utf8, policy, threads, ids, &stop))
    };
    encoded.map_err(Failure::Unencodable)?.map_err(Failure::Engine)
}

impl Encoded {
    /// Encodes text `i` at the end of this run; false if it failed.
    fn add(&mut self, i: usize, encode: impl FnOnce(&mut Vec<Rank>) -> Result<(), Failure>) -> bool {
        let start = self.ids.len();
        let result = encode(&mut self.ids);
        let ok = result.is_ok();
        if !ok {
            self.ids.truncate(start);
        }
        self.texts.push((i, result.map(|_| start..self.ids.len())));
        ok
    }

    /// Whether the run is long enough to hand over.
    fn full(&self) -> bool {
        self.ids.len() >= RUN_IDS || self.texts.len() >= RUN_TEXTS
    }
}

/// A batch of fewer characters than this is encoded on the calling thread alone: going
/// through the pool costs about 25 µs a call (a batch of four short texts took 51 µs
/// through it and 26 µs without, both with 25 µs of the since-removed core-count reads),
/// more than a pool thread saves on a few KB.
const SMALL_BATCH: usize = 4096;

/// How long a decoding batch on the calling thread alone holds the GIL at most before it
/// releases it once: CPython's default switch interval, after which a thread waiting for
/// the GIL asks for it.
const GIL_HOLD: std::time::Duration = std::time::Duration::from_millis(5);

/// A decoding batch of fewer ids than this is decoded on the calling thread alone (10
/// short lists, 126 ids: 6 µs on one thread, 25 µs through the pool; 100 lists, 1,137
/// ids: 40 against 62 µs).
const SMALL_DECODE_BATCH: usize = 4096;

/// A decoding batch reads lists of ids at most this many ids ahead of the objects it has
/// made (each list counted [`LIST_COST`] ids more than it holds).
const DECODE_WINDOW: usize = 1 << 16;

/// In a decoding batch's counts of ids (runs, chunks, the read-ahead window), a list
/// counts this many ids more than it holds: an empty one is work too.
const LIST_COST: usize = 16;

/// A run of encoded texts is handed over once it holds this many ids or texts.
const RUN_IDS: usize = 1 << 14;
const RUN_TEXTS: usize = 256;

/// Encodes a batch into a Python list of lists of ints. Building the lists needs the GIL,
/// so only this thread can do it. It is one of the `threads` that encode: `threads - 1`
/// pool threads claim bundles of texts in order and send their ids here in runs, and this
/// thread builds the lists of each run as soon as it arrives and, while none is waiting,
/// claims and encodes a run of its own (with the GIL released, as when it waits at the
/// end). So there are never more threads at work than cores (the pool encoding with all
/// `threads` while this thread built the lists left three busy threads on two cores).
///
/// Before that, this thread only takes a reference to each str and reads its length, to
/// cut the batch into bundles ([`BatchTexts`]); the thread that encodes a
/// text reads where its characters are stored and makes its UTF-8, in that thread's own
/// buffer. Made here, the UTF-8 of text that is not ASCII (a few ms for a few MB) was work
/// that no other thread could share, and one batch of 16 threads ran at the speed of 8
/// (see PERFORMANCE.md).
fn encode_batch_to_lists<'py>(py: Python<'py>, enc: &Encoder, texts: &BatchTexts<'py>, policy: Option<&SpecialPolicy>, threads: usize) -> PyResult<Bound<'py, PyList>> {
    let n = texts.len();
    let threads = threads.min(batch::available_cores()).max(1);
    let view = texts.view();
    let watch = SignalWatch::new(py, texts.chars());
    if n <= 1 || texts.chars() < SMALL_BATCH {
        // Encode here (this thread's piece cache stays warm across calls); only one long
        // text is still cut into chunks encoded on `threads` cores.
        let threads = if n <= 1 { threads } else { 1 };
        let mut out = Vec::with_capacity(n);
        let mut failed = None;
        py.detach(|| {
            for i in 0..n {
                let text = view.storage(i);
                let mut ids = Vec::with_capacity(text.chars() / 3 + 1);
                if let Err(e) = encode_stored(enc, text, policy, threads, &mut ids, &watch) {
                    failed = Some((i, e));
                    break;
                }
                out.push(ids);
            }
        });
        if let Some((i, e)) = failed {
            return Err(watch.failure_into_py_err(py, e, &texts.text(i)));
        }
        let lists = out.iter().map(|t| list_of_ids(py, enc, t)).collect::<PyResult<Vec<_>>>()?;
        return PyList::new(py, lists);
    }
    let bundles = texts.bundles();
    let claims = batch::Claims::new(bundles.len());
    // The result, its places filled as the runs come in; returned only once all are filled.
    // SAFETY: a new list of `n` empty (NULL) places, which list deallocation skips. Such a
    // list must be seen by no other code, and the GIL is released while the batch runs:
    // `Collector::stand_aside` takes it out of the collector's lists at once, before
    // anything else runs, so that `gc.get_objects()` in another thread cannot list it
    // (from 3.12 on it otherwise would, and a thread reading its places crashed).
    let out = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n as ffi::Py_ssize_t))?.cast_into_unchecked::<PyList>() };
    let mut filled = 0;
    let collector = Collector::stand_aside(&out);
    let mut failed: Option<(usize, PyErr)> = None;
    // Runs whose lists are made, emptied, for the next run to fill: their vectors keep
    // their room (and its pages), where each new run grew its own from nothing.
    let spares: Mutex<Vec<Encoded>> = Mutex::new(Vec::new());
    let spare = || spares.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    let encode_run = |run: &mut Encoded| {
        while !run.full() {
            let Some(b) = claims.claim() else { break }; // all taken, or given up
            let texts = bundles[b].clone();
            for i in texts {
                if !run.add(i, |ids| encode_stored(enc, view.storage(i), policy, threads, ids, &watch)) {
                    // Every text before this one is claimed (bundles go in order), so the
                    // batch's first failure is among those claimed: nothing more to start.
                    claims.close();
                }
            }
        }
    };
    let (runs, senders) = Handover::<Encoded>::new(threads - 1);
    // Memory for this thread's lists made ready by the helpers (see `ready_arenas`).
    #[cfg(all(unix, not(Py_GIL_DISABLED), not(PyPy)))]
    let ahead = (threads > 1).then(|| crate::ready_arenas::Ahead::start(py, &out));
    let helper = |tx: std::sync::mpsc::Sender<Encoded>| loop {
        #[cfg(all(unix, not(Py_GIL_DISABLED), not(PyPy)))]
        if let Some(ahead) = &ahead {
            ahead.help();
        }
        let mut run = spare();
        encode_run(&mut run);
        if run.texts.is_empty() {
            break;
        }
        let _ = tx.send(run); // the receiver outlives the helpers
    };
    let next_run = |wait: bool| runs.next(py, wait);
    let mut take = |mut run: Encoded| -> PyResult<()> {
        // A signal (Ctrl-C) that arrived meanwhile, its handler run here: an exception it
        // raises (KeyboardInterrupt) ends the batch, the helpers stopping at their next
        // text, instead of after the whole batch. Between runs, so about every 16k ids.
        py.check_signals()?;
        for (i, result) in run.texts.drain(..) {
            match result {
                Ok(range) => {
                    let list = list_of_ids(py, enc, &run.ids[range])?;
                    collector.ignore(&list);
                    out.set_item(i, list)?;
                    filled += 1;
                }
                Err(e) if failed.as_ref().is_none_or(|(j, _)| *j >= i) => failed = Some((i, watch.failure_into_py_err(py, e, &texts.text(i)))),
                Err(_) => {}
            }
        }
        // (a run that one long text made huge is not kept)
        if run.ids.capacity() <= 4 * RUN_IDS {
            run.ids.clear();
            spares.lock().unwrap_or_else(|e| e.into_inner()).push(run);
        }
        Ok(())
    };
    let mut this_thread = || -> PyResult<()> {
        loop {
            // Whatever the helpers finished, then a run of this thread's own.
            while let Some(run) = next_run(false) {
                take(run)?;
            }
            let mut own = spare();
            py.detach(|| encode_run(&mut own));
            if !own.texts.is_empty() {
                take(own)?;
                continue;
            }
            // All taken: the helpers' last runs, until they are done.
            match next_run(true) {
                Some(run) => take(run)?,
                None => return Ok(()),
            }
        }
    };
    if threads <= 1 {
        // This thread alone, run by run: each run's lists are made while its ids are still
        // in the caches, and its vectors are reused (encoding every text first, then making
        // every list, ran many short texts at 0.7 times the speed).
        this_thread()?;
    } else {
        // (this thread fails only without memory for a list)
        runs.run(py, senders, helper, this_thread, || claims.close())?;
    }
    if let Some((_, e)) = failed {
        return Err(e);
    }
    if filled != n {
        return Err(PyRuntimeError::new_err("tokenmill: a batch's text was left unencoded (a bug: please report it)"));
    }
    collector.take_back(&out);
    Ok(out)
}

/// Keeps a batch's result list, while its places are still empty, out of the reach of
/// other threads (on every version: `gc.get_objects()` lists only the objects the
/// collector tracks), and keeps CPython's cyclic garbage collector from going over a
/// batch's lists again and again while the batch makes them, before Python 3.12.
///
/// Until 3.12 the collector runs inside allocations: every 700 new container objects (a
/// list is one) start a collection of the youngest, every tenth of those one of the
/// middle generation, and a full collection, over every tracked object of the program,
/// whenever a quarter more objects have survived since the last. Making the 473k lists of
/// the benchmark's lines, that meant dozens of full collections over a growing heap: on
/// Python 3.11 the one-thread batch took 1.25-1.36 s with the collector on (as it is by
/// default), against 0.36-0.56 s with it off; now 0.55-0.62 s (see PERFORMANCE.md, "Batch
/// encoding"). The lists, which hold only ints, cannot be part of a
/// cycle while the batch holds them, so the batch takes them out of the collector's
/// lists as it makes them, and the result list too, and puts them all back, as new
/// objects, before it returns: the program then sees tracked lists as before, and the
/// collector goes over them once as young objects. From 3.12 on the collector only runs
/// between bytecodes, after the call, and only the result list is taken out.
struct Collector;

impl Collector {
    /// Takes `out`, the batch's result list, out of the collector's lists (every version).
    fn stand_aside(out: &Bound<'_, PyList>) -> Self {
        // SAFETY: a list, with the GIL held; untracking an untracked object does nothing.
        unsafe { ffi::PyObject_GC_UnTrack(out.as_ptr() as *mut std::ffi::c_void) };
        Collector
    }

    /// Takes a list just made out of the collector's lists.
    #[inline]
    fn ignore(&self, list: &Bound<'_, PyList>) {
        Self::untrack(list.as_ptr());
    }

    /// Puts the result list, every place now filled, back, and before 3.12 every list in it
    /// (each was taken out by [`Collector::ignore`], and only this batch has seen them
    /// since).
    fn take_back(self, out: &Bound<'_, PyList>) {
        #[cfg(not(Py_3_12))]
        // SAFETY: the GIL is held; the lists in `out` are untracked lists that only this
        // batch has handled, so none can have been tracked again meanwhile (tracking an
        // object twice is a fatal error).
        unsafe {
            let items = (*(out.as_ptr() as *mut ffi::PyListObject)).ob_item;
            for i in 0..out.len() {
                ffi::PyObject_GC_Track(*items.add(i) as *mut std::ffi::c_void);
            }
        }
        // SAFETY: as above; `out` was taken out by `stand_aside`, and no other code has
        // seen it.
        unsafe { ffi::PyObject_GC_Track(out.as_ptr() as *mut std::ffi::c_void) };
    }

    #[inline]
    fn untrack(list: *mut ffi::PyObject) {
        #[cfg(not(Py_3_12))]
        // SAFETY: a list, with the GIL held; untracking an untracked object does nothing.
        unsafe {
            ffi::PyObject_GC_UnTrack(list as *mut std::ffi::c_void)
        };
        let _ = list;
    }
}

/// Signal handlers run now and then during long work done without the GIL, so that Ctrl-C
/// stops it partway: a batch whose calling thread never holds the GIL while it works
/// (`count_tokens_batch`, `encode_batch_to_numpy`), a batch's long text (asked before
/// each of its chunks, or every 4k ids where it is not cut), and one long text encoded
/// or counted in a single call (asked each time the engine hands over its ids, about
/// every 4k ids). Python runs handlers on its main thread only,
/// so only work called there looks, from that thread, at most every
/// [`SIGNAL_CHECK_EVERY`]: it takes the GIL (which may wait on another Python thread for
/// up to its switch interval, 5 ms by default) and runs the handlers of signals that
/// arrived; an exception one raises is kept and ends the work.
struct SignalWatch {
    /// The thread to look from (the calling thread, when it is Python's main thread) and
    /// when it last looked.
    on: Option<(std::thread::ThreadId, Mutex<std::time::Instant>)>,
    raised: Raised,
}

/// A Python exception raised by Python code that engine work calls back into (a signal
/// handler, a progress callback), kept while the work ends with [`Error::Cancelled`], and
/// given back in place of that error.
#[derive(Default)]
struct Raised(Mutex<Option<PyErr>>);

impl Raised {
    /// Keeps `e`; the error that ends the work.
    fn keep(&self, e: PyErr) -> Error {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        Error::Cancelled
    }

    /// The work's error as a Python exception: the one kept, if it ended `Cancelled` by
    /// [`Raised::keep`].
    fn into_py_err(self, py: Python<'_>, e: Error) -> PyErr {
        match (e, self.0.into_inner().unwrap_or_else(|e| e.into_inner())) {
            (Error::Cancelled, Some(raised)) => raised,
            (e, _) => to_py_err(py, e),
        }
    }

    /// The exception kept, if any, taken out (for work that goes on reporting).
    fn take(&self) -> Option<PyErr> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// How often a batch's calling thread looks for signals (see [`SignalWatch`]).
const SIGNAL_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Work on fewer characters than this ends before the first look (well within
/// [`SIGNAL_CHECK_EVERY`]), so it does not even find out which thread it runs on.
const SIGNAL_WATCH_ABOVE: usize = 1 << 22;

impl SignalWatch {
    /// The watch for a batch of `chars` characters called on this thread.
    /// The watch for one call on `text`, on this thread.
    fn for_text(py: Python<'_>, text: &Bound<'_, PyString>) -> Self {
        // SAFETY: `text` is a str (this reads its header; no call, as every short text
        // passes here).
        Self::new(py, unsafe { ffi::PyUnicode_GET_LENGTH(text.as_ptr()) } as usize)
    }

    fn new(py: Python<'_>, chars: usize) -> Self {
        let mut watch = Self { on: None, raised: Raised::default() };
        // Whether this is Python's main thread. (If `threading` cannot say, as it may not
        // while the interpreter shuts down, the work runs to its end unwatched rather
        // than fail.)
        let on_main = || -> PyResult<bool> {
            let threading = py.import("threading")?;
            let main = threading.call_method0("main_thread")?.getattr("ident")?;
            main.eq(threading.call_method0("get_ident")?)
        };
        if chars >= SIGNAL_WATCH_ABOVE && on_main().unwrap_or(false) {
            watch.on = Some((std::thread::current().id(), Mutex::new(std::time::Instant::now())));
        }
        watch
    }

    /// Between two items of the batch, on any of its threads: `Err(Cancelled)` once a
    /// signal handler has raised.
    fn check(&self) -> Result<(), Error> {
        // (most batches watch nothing: no look at the thread then)
        let Some((on, last)) = &self.on else { return Ok(()) };
        if *on != std::thread::current().id() {
            return Ok(());
        }
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < SIGNAL_CHECK_EVERY {
            return Ok(());
        }
        *last = std::time::Instant::now();
        Python::attach(|py| py.check_signals()).map_err(|e| self.raised.keep(e))
    }

    /// The batch's error as a Python exception: the one a signal handler raised, for a
    /// batch that ended `Cancelled` by [`SignalWatch::check`].
    fn into_py_err(self, py: Python<'_>, e: Error) -> PyErr {
        self.raised.into_py_err(py, e)
    }

    /// A text's failure as a Python exception: the one a signal handler raised, for a
    /// text whose encoding [`SignalWatch::check`] ended.
    fn failure_into_py_err(&self, py: Python<'_>, failure: Failure, text: &Bound<'_, PyString>) -> PyErr {
        // (the kept exception taken only for the text it stopped: another text's failure,
        // met first, must leave it for that one)
        if let Failure::Engine(Error::Cancelled) = failure {
            if let Some(raised) = self.raised.take() {
                return raised;
            }
        }
        failure.into_py_err(py, text)
    }
}

/// Encodes a batch into one array of ids, every text's after the one before, and where
/// each text's ids end (for `Encoding.encode_batch_to_numpy`): native-endian uint32 ids
/// and int64 offsets, `texts.len() + 1` of them from 0, as bytes. No Python object is
/// made per text or per id, so, unlike a batch of lists, the calling thread has nothing
/// to do that the other threads cannot share but a pass over the list ([`BatchTexts`]):
/// it waits while they encode (bundles of texts, as in [`encode_batch_to_lists`]), then
/// while they copy the ids and write the offsets into the two results.
fn encode_batch_flat<'py>(py: Python<'py>, enc: &Encoder, texts: &BatchTexts<'py>, policy: Option<&SpecialPolicy>, threads: usize) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    use ffi::compat::{PyBytesWriter_Create, PyBytesWriter_Discard, PyBytesWriter_FinishWithSize, PyBytesWriter_GetData};
    let n = texts.len();
    let view = texts.view();
    // (a small batch on this thread; one long text still cut into chunks for all threads)
    let small = n > 1 && texts.chars() < SMALL_BATCH;
    let threads = if small { 1 } else { threads.min(batch::available_cores()) };
    let bundles = texts.bundles();
    // Each bundle's ids, and where each of its texts' ids end; or its first failure.
    type Bundle = Result<(Vec<Rank>, Vec<usize>), (usize, Failure)>;
    let watch = SignalWatch::new(py, texts.chars());
    let encoded: Result<Vec<Bundle>, Error> = py.detach(|| {
        batch::map(bundles, threads, |texts| {
            watch.check()?;
            // (room for about one id per three characters: a few grow once or twice)
            let mut ids = Vec::with_capacity(texts.clone().map(|i| view.storage(i).chars()).sum::<usize>() / 3 + 16);
            let mut text_ends = Vec::with_capacity(texts.len());
            for i in texts.clone() {
                match encode_stored(enc, view.storage(i), policy, threads, &mut ids, &watch) {
                    Err(Failure::Engine(Error::Cancelled)) => return Err(Error::Cancelled),
                    Err(f) => return Ok(Err((i, f))),
                    Ok(()) => {}
                }
                text_ends.push(ids.len());
            }
            Ok(Ok((ids, text_ends)))
        })
    });
    let mut encoded = encoded.map_err(|e| watch.into_py_err(py, e))?;
    // (bundles in order, each stopped at its first failure: the first failed bundle holds
    // the batch's first failure)
    if let Some(k) = encoded.iter().position(Result::is_err) {
        if let Err((i, failure)) = encoded.swap_remove(k) {
            return Err(failure.into_py_err(py, &texts.text(i)));
        }
    }
    // Where each bundle's ids and offsets go in the results (a prefix over the bundles).
    // Each bundle's ids are moved out of its lock by the thread that copies them, and
    // freed there.
    struct Part {
        at: usize,
        first_text: usize,
        ids: Mutex<Vec<Rank>>,
        text_ends: Vec<usize>,
    }
    let mut parts: Vec<Part> = Vec::with_capacity(encoded.len());
    let (mut total, mut texts_before) = (0, 0);
    for (ids, text_ends) in encoded.into_iter().flatten() {
        let (at, first_text) = (total, texts_before);
        total += ids.len();
        texts_before += text_ends.len();
        parts.push(Part { at, first_text, ids: Mutex::new(ids), text_ends });
    }
    debug_assert_eq!(texts_before, n);
    const ID: usize = std::mem::size_of::<Rank>();
    const OFFSET: usize = std::mem::size_of::<i64>();
    // SAFETY: the writers belong to this call until they are finished or discarded; the
    // pool writes exactly their bytes, each bundle's ids and offsets after those before
    // it (the parts are disjoint), all before they are finished; offset 0 is written here.
    unsafe {
        let ids_writer = PyBytesWriter_Create((total * ID) as ffi::Py_ssize_t);
        if ids_writer.is_null() {
            return Err(PyErr::fetch(py));
        }
        let offsets_writer = PyBytesWriter_Create(((n + 1) * OFFSET) as ffi::Py_ssize_t);
        if offsets_writer.is_null() {
            let e = PyErr::fetch(py);
            PyBytesWriter_Discard(ids_writer);
            return Err(e);
        }
        let id_places = Places(PyBytesWriter_GetData(ids_writer) as *mut u8);
        let offset_places = Places(PyBytesWriter_GetData(offsets_writer) as *mut i64);
        offset_places.0.write_unaligned(0);
        // Copied by the pool, with the GIL released (nothing else can reach the writers):
        // the ids are many MB for a batch of many MB, and their memory, new, is faulted in
        // page by page by whichever thread writes it first.
        let copied = py.detach(|| {
            batch::map(&parts, threads, |part| {
                let (ids, offsets) = (&id_places, &offset_places);
                let mine = std::mem::take(&mut *part.ids.lock().unwrap_or_else(|e| e.into_inner()));
                // (as bytes: a writer's buffer need not be aligned for ids)
                std::ptr::copy_nonoverlapping(mine.as_ptr() as *const u8, ids.0.add(part.at * ID), mine.len() * ID);
                for (k, &end) in part.text_ends.iter().enumerate() {
                    offsets.0.add(part.first_text + k + 1).write_unaligned((part.at + end) as i64);
                }
                Ok(())
            })
        });
        if let Err(e) = copied {
            PyBytesWriter_Discard(ids_writer);
            PyBytesWriter_Discard(offsets_writer);
            return Err(to_py_err(py, e));
        }
        let finish = |writer, size: usize| -> PyResult<Bound<'py, PyBytes>> {
            let obj = PyBytesWriter_FinishWithSize(writer, size as ffi::Py_ssize_t);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked::<PyBytes>())
        };
        let ids = finish(ids_writer, total * ID);
        let offsets = finish(offsets_writer, (n + 1) * OFFSET);
        Ok((ids?, offsets?))
    }
}

/// The number of ids of `text` (under `policy`, or as ordinary text with `None`), without
/// keeping them: the engine hands them over a few thousand at a time into a small buffer
/// that is only counted, so no list, int or array of ids is made, whatever the text's
/// length.
fn count_ids(py: Python<'_>, enc: &Encoder, text: &Bound<'_, PyString>, policy: Option<&SpecialPolicy>) -> PyResult<usize> {
    let watch = SignalWatch::for_text(py, text);
    with_text(py, text, |t| {
        let mut n = 0usize;
        // (a short text's buffer sized for it: about one id per three bytes)
        let every = (t.len() / 3 + 16).min(DRAIN_EVERY);
        enc.encode_draining(t, policy, every, |ids| {
            n += ids.len();
            watch.check().is_err()
        })
        .map(|()| n)
    })?
    .map_err(|e| watch.into_py_err(py, e))
}

/// The number of ids of each text of a batch, counted on `threads` threads as
/// [`encode_batch_flat`] encodes (bundles of texts; a long text cut into chunks for all
/// threads), each bundle's ids kept only until they are counted.
fn count_batch<'py>(py: Python<'py>, enc: &Encoder, texts: &BatchTexts<'py>, policy: Option<&SpecialPolicy>, threads: usize) -> PyResult<Vec<usize>> {
    let n = texts.len();
    let view = texts.view();
    let small = n > 1 && texts.chars() < SMALL_BATCH;
    let threads = if small { 1 } else { threads.min(batch::available_cores()) };
    let bundles = texts.bundles();
    let watch = SignalWatch::new(py, texts.chars());
    // Each bundle's counts, or its first failure.
    type Counted = Result<Vec<usize>, (usize, Failure)>;
    let counted: Result<Vec<Counted>, Error> = py.detach(|| {
        batch::map(bundles, threads, |texts| {
            watch.check()?;
            let mut ids = Vec::new();
            let mut counts = Vec::with_capacity(texts.len());
            for i in texts.clone() {
                ids.clear();
                match encode_stored(enc, view.storage(i), policy, threads, &mut ids, &watch) {
                    Err(Failure::Engine(Error::Cancelled)) => return Err(Error::Cancelled),
                    Err(f) => return Ok(Err((i, f))),
                    Ok(()) => {}
                }
                counts.push(ids.len());
            }
            Ok(Ok(counts))
        })
    });
    let counted = counted.map_err(|e| watch.into_py_err(py, e))?;
    let mut all = Vec::with_capacity(n);
    for bundle in counted {
        match bundle {
            Ok(counts) => all.extend(counts),
            // (bundles in order: the first failed one holds the batch's first failure)
            Err((i, failure)) => return Err(failure.into_py_err(py, &texts.text(i))),
        }
    }
    Ok(all)
}

/// `tokens` as native-endian uint32 bytes, copied once (not into a zeroed object).
fn u32_bytes<'py>(py: Python<'py>, tokens: &[Rank]) -> Bound<'py, PyBytes> {
    // SAFETY: every id is four plain bytes; the slice covers exactly the ids' memory.
    let raw = unsafe { std::slice::from_raw_parts(tokens.as_ptr() as *const u8, std::mem::size_of_val(tokens)) };
    PyBytes::new(py, raw)
}

/// The compiled encoder behind `tokenmill.Encoding`.
#[pyclass(frozen, module = "tokenmill._core", name = "CoreBPE")]
pub struct PyCoreBPE {
    inner: Arc<Encoder>,
}

#[pymethods]
impl PyCoreBPE {
    /// `CoreBPE(mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int], pattern: str)`
    #[new]
    fn new(py: Python<'_>, mergeable_ranks: &Bound<'_, PyDict>, special_tokens: &Bound<'_, PyDict>, pattern: &str) -> PyResult<Self> {
        let tokens = DictTokens::read(mergeable_ranks)?;
        let mut specials = Vec::with_capacity(special_tokens.len());
        for (k, v) in special_tokens.iter() {
            // (PyO3's own errors, as tiktoken's: a TypeError for a key that is no str or a
            // value that is no int, UnicodeEncodeError for a lone surrogate, OverflowError
            // for an int outside [0, 2**32))
            let k: String = k.extract()?;
            let v: Rank = v.extract()?;
            specials.push((k, v));
        }
        let pattern = pattern.to_string();
        let enc = py
            .detach(move || Encoder::new(tokens.iter(), specials, &pattern))
            .map_err(|e| to_py_err(py, e))?;
        crate::shared_ints::prepare(py, enc.vocab());
        Ok(Self { inner: Arc::new(enc) })
    }

    fn encode_ordinary<'py>(&self, py: Python<'py>, text: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyList>> {
        encode_list(py, &self.inner, text, None)
    }

    /// As tiktoken's `CoreBPE.encode(text, allowed_special)` when `disallowed_special` is
    /// left out (no check for disallowed special tokens, which tiktoken makes in Python).
    #[pyo3(signature = (text, allowed_special, disallowed_special=None))]
    fn encode<'py>(&self, py: Python<'py>, text: &Bound<'py, PyString>, allowed_special: &Bound<'_, PyAny>, disallowed_special: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyList>> {
        let policy = parse_policy(&self.inner, allowed_special, &none_disallowed(py, disallowed_special))?;
        encode_list(py, &self.inner, text, Some(&policy))
    }

    /// Token ids as native-endian uint32 bytes (for `numpy.frombuffer`).
    #[pyo3(signature = (text, allowed_special, disallowed_special=None))]
    fn encode_to_bytes<'py>(&self, py: Python<'py>, text: &Bound<'py, PyString>, allowed_special: &Bound<'_, PyAny>, disallowed_special: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyBytes>> {
        let policy = parse_policy(&self.inner, allowed_special, &none_disallowed(py, disallowed_special))?;
        if let Some(bytes) = long_text_bytes(text)? {
            return encode_into_bytes(py, &self.inner, text, Some(&policy), bytes);
        }
        let tokens = with_text(py, text, |text| self.inner.encode(text, &policy))?.map_err(|e| to_py_err(py, e))?;
        Ok(u32_bytes(py, &tokens))
    }

    /// tiktoken's name for [`encode_to_bytes`](Self::encode_to_bytes) without
    /// `disallowed_special` (its buffer and these bytes both read as uint32 through
    /// `numpy.frombuffer`).
    fn encode_to_tiktoken_buffer<'py>(&self, py: Python<'py>, text: &Bound<'py, PyString>, allowed_special: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        self.encode_to_bytes(py, text, allowed_special, None)
    }

    #[pyo3(signature = (texts, allowed_special, disallowed_special, num_threads))]
    fn encode_batch<'py>(&self, py: Python<'py>, texts: &Bound<'py, PyList>, allowed_special: &Bound<'_, PyAny>, disallowed_special: &Bound<'_, PyAny>, num_threads: usize) -> PyResult<Bound<'py, PyList>> {
        let policy = parse_policy(&self.inner, allowed_special, disallowed_special)?;
        encode_batch_to_lists(py, &self.inner, &BatchTexts::of_list(texts)?, Some(&policy), num_threads)
    }

    /// `(ids, offsets)` of a batch as bytes: native-endian uint32 ids of every text, one
    /// after the other, and int64 offsets (text `i`'s ids are `ids[offsets[i]:offsets[i + 1]]`).
    #[pyo3(signature = (texts, allowed_special, disallowed_special, num_threads))]
    fn encode_batch_to_bytes<'py>(&self, py: Python<'py>, texts: &Bound<'py, PyList>, allowed_special: &Bound<'_, PyAny>, disallowed_special: &Bound<'_, PyAny>, num_threads: usize) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let policy = parse_policy(&self.inner, allowed_special, disallowed_special)?;
        encode_batch_flat(py, &self.inner, &BatchTexts::of_list(texts)?, Some(&policy), num_threads)
    }

    #[pyo3(signature = (texts, num_threads))]
    fn encode_ordinary_batch<'py>(&self, py: Python<'py>, texts: &Bound<'py, PyList>, num_threads: usize) -> PyResult<Bound<'py, PyList>> {
        encode_batch_to_lists(py, &self.inner, &BatchTexts::of_list(texts)?, None, num_threads)
    }

    /// The number of ids `encode_ordinary` would return, without making them.
    fn count_ordinary(&self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<usize> {
        count_ids(py, &self.inner, text, None)
    }

    /// The number of ids `encode` would return (or its error), without making them.
    fn count(&self, py: Python<'_>, text: &Bound<'_, PyString>, allowed_special: &Bound<'_, PyAny>, disallowed_special: &Bound<'_, PyAny>) -> PyResult<usize> {
        let policy = parse_policy(&self.inner, allowed_special, disallowed_special)?;
        count_ids(py, &self.inner, text, Some(&policy))
    }

    #[pyo3(signature = (texts, num_threads))]
    fn count_ordinary_batch(&self, py: Python<'_>, texts: &Bound<'_, PyList>, num_threads: usize) -> PyResult<Vec<usize>> {
        count_batch(py, &self.inner, &BatchTexts::of_list(texts)?, None, num_threads)
    }

    #[pyo3(signature = (texts, allowed_special, disallowed_special, num_threads))]
    fn count_batch(&self, py: Python<'_>, texts: &Bound<'_, PyList>, allowed_special: &Bound<'_, PyAny>, disallowed_special: &Bound<'_, PyAny>, num_threads: usize) -> PyResult<Vec<usize>> {
        let policy = parse_policy(&self.inner, allowed_special, disallowed_special)?;
        count_batch(py, &self.inner, &BatchTexts::of_list(texts)?, Some(&policy), num_threads)
    }

    #[pyo3(signature = (text, allowed_special, disallowed_special=None))]
    fn encode_with_unstable(&self, py: Python<'_>, text: &Bound<'_, PyString>, allowed_special: &Bound<'_, PyAny>, disallowed_special: Option<&Bound<'_, PyAny>>) -> PyResult<(Vec<Rank>, Vec<Vec<Rank>>)> {
        let policy = parse_policy(&self.inner, allowed_special, &none_disallowed(py, disallowed_special))?;
        with_text(py, text, |text| self.inner.encode_with_unstable(text, &policy))?.map_err(|e| to_py_err(py, e))
    }

    fn encode_single_token(&self, py: Python<'_>, piece: &[u8]) -> PyResult<Rank> {
        self.inner.vocab().single_token(piece).map_err(|e| to_py_err(py, e))
    }

    fn encode_single_piece(&self, py: Python<'_>, piece: &[u8]) -> PyResult<Vec<Rank>> {
        self.inner.encode_single_piece(piece).map_err(|e| to_py_err(py, e))
    }

    fn _encode_bytes(&self, py: Python<'_>, data: &[u8]) -> PyResult<Vec<Rank>> {
        py.detach(|| self.inner.encode_bytes(data)).map_err(|e| to_py_err(py, e))
    }

    fn decode_bytes<'py>(&self, py: Python<'py>, tokens: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let tokens = ids_from("tokens", tokens)?;
        let bytes = py.detach(|| self.inner.decode_bytes(&tokens)).map_err(|e| to_py_err(py, e))?;
        Ok(PyBytes::new(py, &bytes))
    }

    #[pyo3(signature = (batch, num_threads))]
    fn decode_bytes_batch<'py>(&self, py: Python<'py>, batch: Vec<Bound<'py, PyAny>>, num_threads: usize) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        decode_batch_to(py, &self.inner, &batch, num_threads, true, |b| Ok(PyBytes::new(py, b)))
    }

    /// Token ids decoded to a str, as `decode_bytes(tokens).decode("utf-8", errors)` would
    /// be, without making the bytes object first.
    fn decode_str<'py>(&self, py: Python<'py>, tokens: &Bound<'py, PyAny>, errors: &str) -> PyResult<Bound<'py, PyString>> {
        let tokens = ids_from("tokens", tokens)?;
        let bytes = py.detach(|| self.inner.decode_bytes(&tokens)).map_err(|e| to_py_err(py, e))?;
        str_from_utf8(py, &bytes, &errors_name(errors)?)
    }

    /// [`PyCoreBPE::decode_str`] of every list of ids in `batch`, decoded in parallel.
    #[pyo3(signature = (batch, errors, num_threads))]
    fn decode_str_batch<'py>(&self, py: Python<'py>, batch: Vec<Bound<'py, PyAny>>, errors: &str, num_threads: usize) -> PyResult<Vec<Bound<'py, PyString>>> {
        // CPython decodes UTF-8 under these handlers without calling Python code.
        let builtin = matches!(errors, "strict" | "replace" | "ignore" | "surrogateescape");
        let errors = errors_name(errors)?;
        decode_batch_to(py, &self.inner, &batch, num_threads, builtin, |b| str_from_utf8(py, b, &errors))
    }

    fn decode_single_token_bytes<'py>(&self, py: Python<'py>, token: Rank) -> PyResult<Bound<'py, PyBytes>> {
        match self.inner.vocab().token_bytes(token) {
            Some(b) => Ok(PyBytes::new(py, b)),
            None => Err(PyKeyError::new_err(token.to_string())),
        }
    }

    fn decode_tokens_bytes<'py>(&self, py: Python<'py>, tokens: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let tokens = ids_from("tokens", tokens)?;
        let vocab = self.inner.vocab();
        let mut items = Vec::with_capacity(tokens.len());
        for t in tokens {
            match vocab.token_bytes(t) {
                Some(b) => items.push(PyBytes::new(py, b)),
                None => return Err(PyKeyError::new_err(t.to_string())),
            }
        }
        PyList::new(py, items)
    }

    fn token_byte_values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let sorted = py.detach(|| self.inner.vocab().sorted_tokens());
        PyList::new(py, sorted.iter().map(|b| PyBytes::new(py, b)))
    }

    /// The pieces the pre-tokenizer splits `text` into (a diagnostic).
    fn split(&self, py: Python<'_>, text: &Bound<'_, PyString>) -> PyResult<Vec<String>> {
        with_text(py, text, |text| self.inner.splitter().pieces(text).map(|v| v.into_iter().map(str::to_string).collect()))?
            .map_err(|e| to_py_err(py, e))
    }

    /// Whether the pattern runs on a hand-written scanner or the DFA (else on fancy-regex).
    #[getter]
    fn fast_pretokenizer(&self) -> bool {
        self.inner.splitter().is_fast()
    }
}

/// Span counts for training: fed batches of documents, then turned into merges.
#[pyclass(module = "tokenmill._core", name = "SpanCounter")]
pub struct PySpanCounter {
    inner: SpanCounts,
}

#[pymethods]
impl PySpanCounter {
    #[new]
    fn new(py: Python<'_>, pattern: &str) -> PyResult<Self> {
        Ok(Self { inner: SpanCounts::new(pattern).map_err(|e| to_py_err(py, e))? })
    }

    /// Splits and counts a batch of documents in parallel, without the GIL.
    #[pyo3(signature = (docs, num_threads))]
    fn update<'py>(&mut self, py: Python<'py>, docs: Vec<Bound<'py, PyString>>, num_threads: usize) -> PyResult<()> {
        // Documents are read as UTF-8 without leaving a copy behind in each str (which a
        // caller holding its corpus would pay for the whole training): see `text_utf8`.
        let texts = docs.iter().map(text_utf8).collect::<PyResult<Vec<_>>>()?;
        let inner = &mut self.inner;
        py.detach(|| inner.add(&texts, num_threads)).map_err(|e| to_py_err(py, e))
    }

    /// Adds `count` occurrences of one span, as if it had been found in the text.
    fn add_span(&mut self, span: &str, count: u64) {
        self.inner.add_span(span, count);
    }

    #[getter]
    fn documents(&self) -> u64 {
        self.inner.documents()
    }

    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }

    #[getter]
    fn distinct_spans(&self) -> usize {
        self.inner.distinct()
    }

    #[getter]
    fn total_spans(&self) -> u64 {
        self.inner.total_spans()
    }

    /// Learns up to `num_merges` merges, on up to `threads` threads (merges found in many
    /// spans are split over them; the merges are the same for any number). `progress(done,
    /// total, left, right, new_id, count)` is called about every 1%; an exception it
    /// raises (or Ctrl-C) stops training. Returns the merges as `(left, right)` pairs and
    /// the bytes of every token by id.
    #[pyo3(signature = (num_merges, progress=None, threads=1))]
    fn learn_merges<'py>(
        &self,
        py: Python<'py>,
        num_merges: u32,
        progress: Option<Py<PyAny>>,
        threads: usize,
    ) -> PyResult<(Vec<trainer::Pair>, Bound<'py, PyList>)> {
        let inner = &self.inner;
        let failure = Raised::default();
        let result = py.detach(|| {
            let (spans, counts) = inner.sorted()?;
            trainer::learn_merges(&spans, &counts, num_merges, threads, |p| {
                Python::attach(|py| {
                    let outcome = py.check_signals().and_then(|_| match &progress {
                        Some(cb) => cb.call1(py, (p.done, p.total, p.pair.0, p.pair.1, p.new_id, p.count)).map(|_| ()),
                        None => Ok(()),
                    });
                    outcome.map_err(|e| failure.keep(e))
                })
            })
        });
        let merges = result.map_err(|e| failure.into_py_err(py, e))?;
        let tokens = trainer::token_bytes(&merges);
        let list = PyList::new(py, tokens.iter().map(|t| PyBytes::new(py, t)))?;
        Ok((merges, list))
    }
}

/// The number of cores batch calls may use.
#[pyfunction]
fn available_cores() -> usize {
    batch::available_cores()
}

/// `parse_tiktoken_canonical(contents: bytes) -> dict[bytes, int] | None`: a `.tiktoken`
/// file in its canonical form as `{token: rank}`, or `None` for any other form (a
/// malformed file included, or one that repeats a token or a rank), which the caller
/// parses line by line. See `tiktoken_file.rs`.
#[pyfunction]
fn parse_tiktoken_canonical<'py>(py: Python<'py>, contents: &[u8]) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(parsed) = py.detach(|| crate::tiktoken_file::parse_canonical(contents)) else {
        return Ok(None);
    };
    let ranks = PyDict::new(py);
    for (token, rank) in parsed.iter() {
        ranks.set_item(PyBytes::new(py, token), rank)?;
    }
    Ok((ranks.len() == parsed.len()).then_some(ranks))
}

/// A `mergeable_ranks` dict read while the GIL is held: its keys' bytes back to back, with
/// where each key ends and its value, in the dict's order. No allocation or hashing per
/// token (the dict's keys are distinct).
struct DictTokens {
    bytes: Vec<u8>,
    ends: Vec<(usize, Rank)>,
}

impl DictTokens {
    fn read(mergeable_ranks: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut bytes: Vec<u8> = Vec::new();
        let mut ends: Vec<(usize, Rank)> = Vec::with_capacity(mergeable_ranks.len());
        for (k, v) in mergeable_ranks.iter() {
            let k = k.cast::<PyBytes>().map_err(|_| PyTypeError::new_err("mergeable_ranks keys must be bytes"))?;
            let v: Rank = v.extract()?; // (TypeError, or OverflowError outside [0, 2**32), as tiktoken's)
            bytes.extend_from_slice(k.as_bytes());
            ends.push((bytes.len(), v));
        }
        Ok(Self { bytes, ends })
    }

    /// The tokens with their ranks, in the dict's order.
    fn iter(&self) -> impl Iterator<Item = (&[u8], Rank)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&(end, _)| end));
        starts.zip(&self.ends).map(|(start, &(end, id))| (&self.bytes[start..end], id))
    }
}

/// `tiktoken_merges(mergeable_ranks: dict[bytes, int]) -> (list[tuple[int, bytes, bytes]],
/// list[bytes])`: every token's tiktoken merge as `(rank, left, right)`, sorted by rank, and
/// the tokens no merge run rebuilds, in the dict's order (see `merge_list.rs`).
#[pyfunction]
fn tiktoken_merges<'py>(py: Python<'py>, mergeable_ranks: &Bound<'py, PyDict>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let tokens = DictTokens::read(mergeable_ranks)?;
    let (merges, unreachable) = py
        .detach(|| -> Result<_, Error> {
            let vocab = crate::vocab::Vocab::new(tokens.iter(), Vec::new())?;
            let (mut merges, mut unreachable) = (Vec::new(), Vec::new());
            for (token, rank) in tokens.iter().filter(|(t, _)| t.len() >= 2) {
                match crate::merge_list::last_merge(&vocab, token) {
                    Some(split) => merges.push((rank, token.split_at(split))),
                    None => unreachable.push(token),
                }
            }
            merges.sort_unstable_by_key(|&(rank, _)| rank);
            Ok((merges, unreachable))
        })
        .map_err(|e| to_py_err(py, e))?;
    let merges = PyList::new(py, merges.into_iter().map(|(rank, (left, right))| (rank, PyBytes::new(py, left), PyBytes::new(py, right))))?;
    let unreachable = PyList::new(py, unreachable.into_iter().map(|t| PyBytes::new(py, t)))?;
    Ok((merges, unreachable))
}

/// The module tells a free-threaded CPython (3.13t, 3.14t) that it needs the GIL, which
/// that interpreter then turns on when the module is imported (unless `PYTHON_GIL=0`
/// forces it off). Parts of the bindings read Python objects without a lock on the
/// understanding that the GIL keeps other threads from changing them meanwhile (a list of
/// ids being decoded, for one); without the GIL that no longer holds.
#[pymodule(gil_used = true)]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCoreBPE>()?;
    m.add_class::<PySpanCounter>()?;
    m.add_function(wrap_pyfunction!(available_cores, m)?)?;
    m.add_function(wrap_pyfunction!(parse_tiktoken_canonical, m)?)?;
    m.add_function(wrap_pyfunction!(tiktoken_merges, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
