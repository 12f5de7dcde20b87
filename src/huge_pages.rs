//! Asking the kernel to back a large, long-lived buffer with huge pages. Used where a
//! loop reads such a buffer at random places (the trainer's span store): with 4 KiB pages,
//! nearly every visit needs a page walk as well as the line, since the processor's TLB
//! covers a few megabytes at most.

/// Where the system lets a program ask (Linux's transparent huge pages in their `madvise`
/// or `always` mode), asks for huge pages under the whole 2 MiB blocks of `buf`'s
/// allocation. Best done before the buffer is first written: the pages are then faulted
/// in huge. Only advice: nothing changes in what the buffer holds, and where it is not
/// followed (or on other systems) the buffer simply keeps small pages.
pub fn advise<T>(buf: &mut Vec<T>) {
    advise_range(buf.as_mut_ptr() as usize, buf.capacity() * std::mem::size_of::<T>());
}

/// [`advise`] for the `len` bytes at `start`, memory this process allocated.
fn advise_range(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (first, last) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
        if last > first {
            // SAFETY: the range lies inside an allocation of this process; the advice
            // changes how its pages are backed, never what they hold.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

/// Tables of at least this many bytes are asked to be backed by huge pages.
const LARGE: usize = 4 << 20;

/// The global allocator, with every allocation of [`LARGE`] bytes or more advised as
/// [`advise`] does: for hash tables that grow to megabytes and are probed at random (the
/// trainer's pair statistics).
#[derive(Clone, Copy, Default)]
pub struct HugePageTables;

// SAFETY: every call is passed on to the global allocator unchanged; the advice given on
// a fresh allocation changes how its pages are backed, never what they hold.
unsafe impl allocator_api2::alloc::Allocator for HugePageTables {
    fn allocate(&self, layout: std::alloc::Layout) -> Result<std::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        let block = allocator_api2::alloc::Global.allocate(layout)?;
        if layout.size() >= LARGE {
            advise_range(block.as_ptr() as *mut u8 as usize, layout.size());
        }
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: std::ptr::NonNull<u8>, layout: std::alloc::Layout) {
        // SAFETY: `ptr` was allocated by `allocate` above, that is by the global allocator
        // with this layout.
        unsafe { allocator_api2::alloc::Global.deallocate(ptr, layout) }
    }
}
