//! Asking the processor to bring a cache line in before it is needed. Used where the
//! addresses of coming lookups are known some work ahead (the pieces the scanner has found
//! but not yet encoded, the ids of a list being decoded or made into a list), so that their
//! cache misses overlap instead of following one another, and for the text 1 KiB ahead of
//! the scanner, whose stream the processor's own prefetcher loses at each new page.

/// Hints that the line holding `p` will be read soon. Only a hint: it never faults or
/// changes memory, whatever the address. Does nothing on other architectures.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, and every x86_64 CPU has SSE.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
