//! A Python `str`'s text as UTF-8, converted here rather than by CPython.
//!
//! CPython stores a str's characters one, two or four bytes each, as wide as its widest
//! character needs (PEP 393): Latin-1, UCS-2 or UCS-4. Asked for UTF-8
//! (`PyUnicode_AsUTF8AndSize`, what PyO3 does to pass a `&str`), it converts every str that
//! is not pure ASCII and keeps the copy attached to the str for as long as the str lives.
//! Encoding a corpus held in memory then leaves a second copy of all its non-ASCII text
//! behind (a sixth more memory for the benchmark's mix, where a str grew from 9.6 to 15.9
//! MB; more than twice the memory for CJK text, three bytes of UTF-8 a character against
//! two). Converting from the storage ourselves leaves the str as it was, uses one reused
//! buffer per thread instead of a fresh allocation per str, and needs no GIL.
//!
//! Only a lone surrogate (a code point of U+D800..U+DFFF, which no UTF-8 encodes) cannot
//! be converted; callers then let CPython raise its own `UnicodeEncodeError` for it.

use std::borrow::Cow;
use std::cell::RefCell;

/// A str's characters as CPython stores them.
#[derive(Clone, Copy, Debug)]
pub enum Storage<'a> {
    /// Latin-1 storage that CPython has marked as pure ASCII (it notes that when it makes
    /// the str), so that it need not be scanned again here.
    Ascii(&'a [u8]),
    Latin1(&'a [u8]),
    Ucs2(&'a [u16]),
    Ucs4(&'a [u32]),
}

/// The str holds a code point that has no UTF-8 (a lone surrogate) at this index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unencodable(pub usize);

/// A thread's buffer grown past this is freed after use, so that each Python thread that
/// encodes keeps at most this much (a longer text is converted into fresh memory each
/// time, as CPython's own conversion would be).
const KEEP_BUFFER: usize = 1 << 20;

/// [`Storage::to_cow_on`] converts texts of at least this many characters in parts.
pub const PARALLEL_ABOVE: usize = crate::encoder::SPLIT_ABOVE;

thread_local! {
    static BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
}

impl<'a> Storage<'a> {
    /// The text as UTF-8: borrowed when it is ASCII, else converted into a new string.
    pub fn to_cow(self) -> Result<Cow<'a, str>, Unencodable> {
        if let Some(ascii) = self.ascii() {
            return Ok(Cow::Borrowed(ascii));
        }
        let mut s = String::new();
        self.convert_into(&mut s)?;
        // (room was made for the widest characters; the string may be kept a while)
        s.shrink_to_fit();
        Ok(Cow::Owned(s))
    }

    /// The text as UTF-8, as [`Storage::to_cow`] makes it, but converted in parts on
    /// `threads` threads of the batch pool. For a batch's long text, which is then cut
    /// into chunks encoded on all threads: the thread that took the text converted it
    /// alone while the others waited for the chunks (4.8 million characters, not ASCII:
    /// 3-7 ms of a 40 ms batch on 16 threads).
    pub fn to_cow_on(self, threads: usize) -> Result<Cow<'a, str>, Unencodable> {
        let n = self.chars();
        if threads <= 1 || n < PARALLEL_ABOVE {
            return self.to_cow();
        }
        if let Some(ascii) = self.ascii() {
            return Ok(Cow::Borrowed(ascii));
        }
        let part = n.div_ceil(threads * 4);
        let starts: Vec<usize> = (0..n).step_by(part).collect();
        let converted = crate::batch::map(&starts, threads, |&start| {
            let mut out = String::new();
            Ok(self.slice(start..(start + part).min(n)).convert_into(&mut out).map(|()| out).map_err(|Unencodable(at)| Unencodable(start + at)))
        });
        // (only if the pool could not be made)
        let Ok(parts) = converted else { return self.to_cow() };
        let mut whole = String::with_capacity(parts.iter().map(|p| p.as_ref().map_or(0, String::len)).sum());
        for p in parts {
            whole.push_str(&p?);
        }
        Ok(Cow::Owned(whole))
    }

    /// Characters `range` of the text.
    fn slice(self, range: std::ops::Range<usize>) -> Storage<'a> {
        match self {
            Storage::Ascii(chars) => Storage::Ascii(&chars[range]),
            Storage::Latin1(chars) => Storage::Latin1(&chars[range]),
            Storage::Ucs2(chars) => Storage::Ucs2(&chars[range]),
            Storage::Ucs4(chars) => Storage::Ucs4(&chars[range]),
        }
    }

    /// Runs `f` on the text as UTF-8: borrowed when it is ASCII, else converted into this
    /// thread's buffer (kept for the next call unless it grew past `KEEP_BUFFER`).
    pub fn with_utf8<R>(self, f: impl FnOnce(&str) -> R) -> Result<R, Unencodable> {
        if let Some(ascii) = self.ascii() {
            return Ok(f(ascii));
        }
        BUFFER.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                let result = self.convert_into(&mut buf).map(|()| f(&buf));
                if buf.capacity() > KEEP_BUFFER {
                    *buf = String::new();
                }
                result
            }
            // (only if `f` itself converted a text on this thread)
            Err(_) => {
                let mut own = String::new();
                self.convert_into(&mut own)?;
                Ok(f(&own))
            }
        })
    }

    /// How many characters the text has.
    pub fn chars(self) -> usize {
        match self {
            Storage::Ascii(chars) | Storage::Latin1(chars) => chars.len(),
            Storage::Ucs2(chars) => chars.len(),
            Storage::Ucs4(chars) => chars.len(),
        }
    }

    /// How many bytes the text takes in UTF-8 (a lone surrogate counted as three, though
    /// it has no UTF-8).
    pub fn utf8_len(self) -> usize {
        /// Summed in chunks of 2^13 characters, each into a `u16` (a character adds at
        /// most 4, so a chunk at most 32768), which the compiler turns into sums of 8 or
        /// 16 lanes at once: five times as fast as adding `usize`s one at a time.
        fn count<T: Copy + Into<u32>>(chars: &[T]) -> usize {
            chars.chunks(1 << 13).map(|chunk| {
                chunk.iter().map(|&c| {
                    let c: u32 = c.into();
                    1 + (c >= 0x80) as u16 + (c >= 0x800) as u16 + (c >= 0x10000) as u16
                }).fold(0u16, u16::wrapping_add) as usize
            }).sum()
        }
        match self {
            Storage::Ascii(chars) => chars.len(),
            Storage::Latin1(chars) => count(chars),
            Storage::Ucs2(chars) => count(chars),
            Storage::Ucs4(chars) => count(chars),
        }
    }

    /// The text itself when it is pure ASCII (stored as Latin-1, every byte below 0x80).
    fn ascii(self) -> Option<&'a str> {
        match self {
            Storage::Ascii(bytes) => {
                debug_assert!(bytes.is_ascii(), "a str marked ASCII holds other bytes");
                // SAFETY: ASCII bytes are UTF-8 as they stand.
                Some(unsafe { std::str::from_utf8_unchecked(bytes) })
            }
            // SAFETY: ASCII bytes are UTF-8 as they stand (one pass over the text, not two).
            Storage::Latin1(bytes) if bytes.is_ascii() => Some(unsafe { std::str::from_utf8_unchecked(bytes) }),
            _ => None,
        }
    }

    /// Replaces `out`'s contents with the text's UTF-8.
    fn convert_into(self, out: &mut String) -> Result<(), Unencodable> {
        // SAFETY: `write_utf8` leaves `bytes` as UTF-8 whether it succeeds or not (an
        // error leaves it empty).
        let bytes = unsafe { out.as_mut_vec() };
        match self {
            Storage::Ascii(chars) | Storage::Latin1(chars) => write_utf8::<u8, 2>(chars, bytes),
            Storage::Ucs2(chars) => write_utf8::<u16, 3>(chars, bytes),
            Storage::Ucs4(chars) => write_utf8::<u32, 4>(chars, bytes),
        }
    }
}

/// A code unit of a str's storage: one character stored as Latin-1, UCS-2 or UCS-4.
trait CodeUnit: Copy + Into<u32> {
    /// Copies the ASCII characters that begin the 16 units at `src` to `dst` as bytes and
    /// returns how many there were (16 when all are ASCII). All 16 bytes at `dst` may be
    /// written; those past the count hold no meaning.
    ///
    /// # Safety
    /// `src` must be valid for reads of 16 units and `dst` for writes of 16 bytes.
    unsafe fn ascii_prefix16(src: *const Self, dst: *mut u8) -> usize;
}

/// With SSE2 (every x86-64 processor), 16 units are tested and narrowed at once: a unit
/// is ASCII when it shifted right by 7 is zero; narrowing saturates, which keeps ASCII
/// exact and a nonzero value nonzero.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::CodeUnit;
    use std::arch::x86_64::*;

    /// How many of the bytes in `high` (one per unit: nonzero when that unit is not ASCII)
    /// are zero before the first nonzero one; `bytes` (the units narrowed) stored at `dst`.
    #[inline(always)]
    unsafe fn store_prefix(high: __m128i, bytes: __m128i, dst: *mut u8) -> usize {
        _mm_storeu_si128(dst as *mut __m128i, bytes);
        let ascii = _mm_movemask_epi8(_mm_cmpeq_epi8(high, _mm_setzero_si128())) as u32;
        (!ascii | 0x1_0000).trailing_zeros() as usize
    }

    impl CodeUnit for u8 {
        #[inline(always)]
        unsafe fn ascii_prefix16(src: *const u8, dst: *mut u8) -> usize {
            let v = _mm_loadu_si128(src as *const __m128i);
            _mm_storeu_si128(dst as *mut __m128i, v);
            ((_mm_movemask_epi8(v) as u32) | 0x1_0000).trailing_zeros() as usize
        }
    }

    impl CodeUnit for u16 {
        #[inline(always)]
        unsafe fn ascii_prefix16(src: *const u16, dst: *mut u8) -> usize {
            let a = _mm_loadu_si128(src as *const __m128i);
            let b = _mm_loadu_si128(src.add(8) as *const __m128i);
            // (a logical shift: a unit of 0x8000 or more, negative as an i16, must not
            // saturate to zero)
            let high = _mm_packus_epi16(_mm_srli_epi16(a, 7), _mm_srli_epi16(b, 7));
            store_prefix(high, _mm_packus_epi16(a, b), dst)
        }
    }

    impl CodeUnit for u32 {
        #[inline(always)]
        unsafe fn ascii_prefix16(src: *const u32, dst: *mut u8) -> usize {
            let x: [__m128i; 4] = std::array::from_fn(|k| _mm_loadu_si128(src.add(4 * k) as *const __m128i));
            let h01 = _mm_packs_epi32(_mm_srli_epi32(x[0], 7), _mm_srli_epi32(x[1], 7));
            let h23 = _mm_packs_epi32(_mm_srli_epi32(x[2], 7), _mm_srli_epi32(x[3], 7));
            let bytes = _mm_packus_epi16(_mm_packs_epi32(x[0], x[1]), _mm_packs_epi32(x[2], x[3]));
            store_prefix(_mm_packus_epi16(h01, h23), bytes, dst)
        }
    }
}

/// Elsewhere, one unit at a time.
#[cfg(not(target_arch = "x86_64"))]
impl<T: Copy + Into<u32>> CodeUnit for T {
    #[inline(always)]
    unsafe fn ascii_prefix16(src: *const T, dst: *mut u8) -> usize {
        for k in 0..16 {
            let c: u32 = (*src.add(k)).into();
            if c >= 0x80 {
                return k;
            }
            *dst.add(k) = c as u8;
        }
        16
    }
}

/// Writes the UTF-8 of `c`, a code point that is not ASCII, at `dst` (which must have room
/// for four bytes) and returns its length, or 0 if `c` has no UTF-8 (a surrogate, or
/// beyond U+10FFFF).
#[inline(always)]
unsafe fn put_wide(c: u32, dst: *mut u8) -> usize {
    if c < 0x800 {
        *dst = 0xC0 | (c >> 6) as u8;
        *dst.add(1) = 0x80 | (c & 0x3F) as u8;
        2
    } else if c < 0x10000 {
        if (0xD800..0xE000).contains(&c) {
            return 0;
        }
        *dst = 0xE0 | (c >> 12) as u8;
        *dst.add(1) = 0x80 | (c >> 6 & 0x3F) as u8;
        *dst.add(2) = 0x80 | (c & 0x3F) as u8;
        3
    } else if c < 0x110000 {
        *dst = 0xF0 | (c >> 18) as u8;
        *dst.add(1) = 0x80 | (c >> 12 & 0x3F) as u8;
        *dst.add(2) = 0x80 | (c >> 6 & 0x3F) as u8;
        *dst.add(3) = 0x80 | (c & 0x3F) as u8;
        4
    } else {
        0
    }
}

/// Replaces `out`'s contents with the UTF-8 of the code points `chars` (`WIDEST`: the most
/// bytes one of them can take), or with nothing if one has no UTF-8 (a surrogate, or
/// beyond U+10FFFF). Written straight into `out`'s spare capacity: ASCII 16 characters
/// at a time, each other character on its own. Most of the text in documents that are not
/// pure ASCII is still ASCII (90% of the characters of the benchmark's long stream's
/// non-ASCII documents); with runs of eight ASCII characters tested in scalar code,
/// converting those documents took twice as long, and with `String::push` per character
/// 1.6 times as long as CPython's own conversion.
#[inline(always)]
fn write_utf8<T: CodeUnit, const WIDEST: usize>(chars: &[T], out: &mut Vec<u8>) -> Result<(), Unencodable> {
    out.clear();
    let n = chars.len();
    out.reserve(n * WIDEST);
    let src = chars.as_ptr();
    let dst = out.as_mut_ptr();
    let mut w = 0;
    let mut i = 0;
    // SAFETY: reads stay below `n`. Writes: `w <= WIDEST * i` throughout (no character
    // takes more than `WIDEST` bytes), so while 16 characters are left the 16 bytes at
    // `w` are within the `WIDEST * n` reserved, and a character's own bytes always are.
    // The bytes `0..w` are all written when the length is set.
    unsafe {
        while i + 16 <= n {
            let ascii = T::ascii_prefix16(src.add(i), dst.add(w));
            i += ascii;
            w += ascii;
            if ascii == 16 {
                continue;
            }
            // A run of characters that are not ASCII, up to the next ASCII one.
            while i < n {
                let c: u32 = (*src.add(i)).into();
                if c < 0x80 {
                    break;
                }
                let len = put_wide(c, dst.add(w));
                if len == 0 {
                    return Err(Unencodable(i));
                }
                w += len;
                i += 1;
            }
        }
        while i < n {
            let c: u32 = (*src.add(i)).into();
            if c < 0x80 {
                *dst.add(w) = c as u8;
                w += 1;
            } else {
                let len = put_wide(c, dst.add(w));
                if len == 0 {
                    return Err(Unencodable(i));
                }
                w += len;
            }
            i += 1;
        }
        out.set_len(w);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of `code_points`, stored as CPython would store it (the narrowest width
    /// that holds them all, or `width` if wider).
    fn stored(code_points: &[u32], width: u8) -> (Vec<u8>, Vec<u16>, Vec<u32>, u8) {
        let widest = code_points.iter().max().copied().unwrap_or(0);
        let w = width.max(if widest > 0xFFFF { 4 } else if widest > 0xFF { 2 } else { 1 });
        (
            code_points.iter().map(|&c| c as u8).collect(),
            code_points.iter().map(|&c| c as u16).collect(),
            code_points.to_vec(),
            w,
        )
    }

    fn storage<'a>(s: &'a (Vec<u8>, Vec<u16>, Vec<u32>, u8)) -> Storage<'a> {
        match s.3 {
            1 => Storage::Latin1(&s.0),
            2 => Storage::Ucs2(&s.1),
            _ => Storage::Ucs4(&s.2),
        }
    }

    /// What the conversion must give: the chars' UTF-8, or the index of the first code
    /// point that is no char.
    fn expected(code_points: &[u32]) -> Result<String, Unencodable> {
        code_points.iter().enumerate().map(|(i, &c)| char::from_u32(c).ok_or(Unencodable(i))).collect()
    }

    fn check(code_points: &[u32]) {
        if code_points.iter().all(|&c| c < 0x80) {
            let bytes: Vec<u8> = code_points.iter().map(|&c| c as u8).collect();
            let ascii = Storage::Ascii(&bytes);
            assert_eq!(ascii.to_cow(), Ok(Cow::Borrowed(std::str::from_utf8(&bytes).unwrap())));
            assert_eq!((ascii.chars(), ascii.utf8_len()), (bytes.len(), bytes.len()));
        }
        for width in [1, 2, 4] {
            let s = stored(code_points, width);
            let want = expected(code_points);
            assert_eq!(storage(&s).to_cow().map(Cow::into_owned), want, "{code_points:x?} width {}", s.3);
            assert_eq!(storage(&s).with_utf8(str::to_string), want, "{code_points:x?} width {}", s.3);
            if let Ok(utf8) = want {
                assert_eq!(storage(&s).utf8_len(), utf8.len(), "{code_points:x?} width {}", s.3);
            }
        }
    }

    #[test]
    fn every_width_converts_every_kind_of_code_point() {
        // The edges of each UTF-8 length, the surrogates' edges, and runs of ASCII long
        // enough to take the eight-at-a-time path, with a wider character at each place.
        let edges = [0, 0x41, 0x7F, 0x80, 0xE9, 0xFF, 0x100, 0x7FF, 0x800, 0x4E2D, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF];
        for &c in &edges {
            check(&[c]);
            for at in 0..20 {
                let mut run: Vec<u32> = (0..19).map(|i| 0x61 + i % 26).collect();
                run.insert(at, c);
                check(&run);
            }
        }
        check(&[]);
        check(&edges);
        // Long enough to be counted in several chunks, each character at its widest.
        for c in [0xE9, 0x4E2D, 0x1F600] {
            check(&vec![c; (1 << 14) + 3]);
        }
        let mut all_bmp: Vec<u32> = (0..0x10000).filter(|c| !(0xD800..0xE000).contains(c)).collect();
        check(&all_bmp);
        all_bmp.reverse();
        check(&all_bmp);
    }

    #[test]
    fn a_long_text_converted_in_parts_is_the_whole_text_converted() {
        // Past PARALLEL_ABOVE, in every width: part edges fall inside runs of wide
        // characters; a lone surrogate is reported at its index in the whole text, the
        // first one when there are several; pure ASCII is borrowed.
        let n = PARALLEL_ABOVE + 4321;
        let cps: Vec<u32> = (0..n as u32).map(|k| [0x61 + k % 26, 0xE9, 0x4E2D, 0x1F600][(k as usize / 5 + k as usize / 7) % 4]).collect();
        for width in [1, 2, 4] {
            let narrow: Vec<u32> = cps.iter().map(|&c| if width == 1 { c.min(0xFF) } else if width == 2 { c.min(0xFFFF) } else { c }).collect();
            let s = stored(&narrow, width);
            for threads in [1, 2, 3, 8] {
                assert_eq!(storage(&s).to_cow_on(threads), storage(&s).to_cow(), "width {width}, {threads} threads");
            }
        }
        let mut bad = cps.clone();
        for at in [n - 1, n / 2 + 17, n / 3] {
            bad[at] = 0xDC00;
            let s = stored(&bad, 4);
            assert_eq!(storage(&s).to_cow_on(4), Err(Unencodable(at)));
        }
        let ascii: Vec<u8> = (0..n).map(|k| b'a' + (k % 26) as u8).collect();
        assert!(matches!(Storage::Latin1(&ascii).to_cow_on(4), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn texts_mixing_ascii_runs_and_wider_characters_convert_exactly() {
        // Every kind of code point at every place of texts up to 80 long, so that each
        // falls at each place of a block of 16 and in the tail after the last block, in
        // runs of different lengths. The wide values include those that narrowing
        // would get wrong: 0x100 (above a byte), 0x8000 and up (negative as an i16),
        // 0x10000 and up (beyond an i16 after the shift).
        let wide = [0x80, 0xBF, 0xFF, 0x100, 0x3A9, 0x7FF, 0x800, 0x4E2D, 0x7FFF, 0x8000, 0xAC00, 0xFF10, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        for _ in 0..4000 {
            let len = next(81);
            let mut cps: Vec<u32> = (0..len).map(|k| 0x20 + (k as u32 * 7) % 0x5F).collect();
            for _ in 0..next(4) {
                if len == 0 {
                    break;
                }
                let at = next(len);
                let run = 1 + next(3);
                for cp in &mut cps[at..(at + run).min(len)] {
                    *cp = wide[next(wide.len())];
                }
            }
            check(&cps);
        }
        // Each position of a 48-character text: a character of each UTF-8 length, and a
        // surrogate.
        for &c in &[0xE9u32, 0x4E2D, 0x1F600, 0xD800] {
            for at in 0..48 {
                let mut cps: Vec<u32> = (0..48).map(|k| 0x61 + k % 26).collect();
                cps[at] = c;
                check(&cps);
            }
        }
    }

    #[test]
    fn a_surrogate_is_reported_where_it_is() {
        for s in [0xD800, 0xDBFF, 0xDC00, 0xDFFF] {
            for at in [0, 1, 7, 8, 9, 15, 16, 17, 30] {
                let mut cps: Vec<u32> = (0..31).map(|i| 0x61 + i % 26).collect();
                cps[at] = s;
                check(&cps);
                cps.push(0x1F600);
                check(&cps);
                let s2 = stored(&cps, 2);
                assert_eq!(storage(&s2).to_cow(), Err(Unencodable(at)));
            }
        }
        // A pair of surrogates is two code points in a str, neither of them encodable.
        check(&[0x61, 0xD83D, 0xDE00]);
    }

    #[test]
    fn ascii_is_borrowed_and_the_buffer_is_reused() {
        let text = b"plain ASCII text".to_vec();
        let Ok(Cow::Borrowed(s)) = Storage::Latin1(&text).to_cow() else { panic!("ASCII was copied") };
        assert_eq!(s.as_ptr(), text.as_ptr());
        let latin1 = [0x63u8, 0x61, 0x66, 0xE9];
        assert_eq!(Storage::Latin1(&latin1).to_cow(), Ok(Cow::Owned::<str>("café".to_string())));
        // The second conversion on a thread writes where the first one did.
        let first = Storage::Latin1(&latin1).with_utf8(|s| s.as_ptr() as usize).unwrap();
        let second = Storage::Ucs2(&[0x4E2D, 0x6587]).with_utf8(|s| (s.as_ptr() as usize, s.to_string())).unwrap();
        assert_eq!(second, (first, "中文".to_string()));
        // A conversion inside another one gets a buffer of its own.
        let nested = Storage::Latin1(&latin1).with_utf8(|outer| {
            let inner = Storage::Ucs4(&[0x1F600]).with_utf8(str::to_string).unwrap();
            (outer.to_string(), inner)
        });
        assert_eq!(nested, Ok(("café".to_string(), "😀".to_string())));
    }

    #[test]
    fn a_huge_text_does_not_keep_its_buffer() {
        let big = vec![0xE9u8; KEEP_BUFFER];
        assert_eq!(Storage::Latin1(&big).with_utf8(str::len), Ok(2 * KEEP_BUFFER));
        assert!(BUFFER.with(|b| b.borrow().capacity()) <= KEEP_BUFFER);
        Storage::Latin1(&[0xE9]).with_utf8(|_| ()).unwrap();
        assert!(BUFFER.with(|b| b.borrow().capacity()) > 0);
    }
}
