//! Asking the kernel to back a large, long-lived buffer with huge pages. Used where a
//! loop reads such a buffer at random places (the trainer's span store, the encoder's
//! first-level piece cache): with 4 KiB pages, nearly every visit needs a page walk as well
//! as the line, since the processor's TLB covers a few megabytes at most.

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

/// A fixed-size table that starts all zero, on memory of its own: on Linux a private
/// mapping that starts on a 2 MiB boundary and is advised for huge pages (so that a few
/// TLB entries cover a table of megabytes), elsewhere the global allocator's zeroed
/// memory. Every page is written once when the table is made, so that its page faults are
/// taken then, not by the first lookups (where no huge page is free, the kernel may first
/// compact memory for one, which can add milliseconds to making the table, once). Owns
/// its table as a `Box` would.
pub struct ZeroedTable<A> {
    table: std::ptr::NonNull<A>,
}

// SAFETY: the table is owned by this value alone, as a `Box<A>`'s contents are.
unsafe impl<A: Send> Send for ZeroedTable<A> {}
// SAFETY: as above; shared access hands out only `&A`.
unsafe impl<A: Sync> Sync for ZeroedTable<A> {}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize).max(4096)
}

/// Huge pages are this size (x86-64, and arm64 with 4 KiB pages); where they are larger or
/// absent, the advice is ignored or covers less of the table, and nothing else changes.
#[cfg(target_os = "linux")]
const HUGE: usize = 2 << 20;

impl<A> ZeroedTable<A> {
    /// A new table with every byte zero.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `A` (integers, atomics and arrays of them are).
    pub unsafe fn new_zeroed() -> Self {
        let layout = std::alloc::Layout::new::<A>();
        assert!(layout.size() > 0 && layout.align() <= 4096, "a table of some bytes, aligned to a page at most");
        #[cfg(target_os = "linux")]
        {
            let page = page_size();
            let len = layout.size().next_multiple_of(page);
            // Mapped with room to start on a 2 MiB boundary, then the room cut away.
            // SAFETY: a new private mapping, seen by no one else until this returns.
            unsafe {
                let map = libc::mmap(std::ptr::null_mut(), len + HUGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
                if map == libc::MAP_FAILED {
                    std::alloc::handle_alloc_error(layout);
                }
                let start = (map as usize).next_multiple_of(HUGE);
                let end = map as usize + len + HUGE;
                if start > map as usize {
                    libc::munmap(map, start - map as usize);
                }
                if end > start + len {
                    libc::munmap((start + len) as *mut libc::c_void, end - start - len);
                }
                advise_range(start, len);
                // A fresh mapping reads as zeros; writing one to each page maps them now
                // (a whole huge page at the first write into it, where the advice holds).
                for at in (start..start + len).step_by(page) {
                    std::ptr::write_volatile(at as *mut u8, 0);
                }
                Self { table: std::ptr::NonNull::new_unchecked(start as *mut A) }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            // SAFETY: the layout has a size (asserted above).
            let p = unsafe { std::alloc::alloc_zeroed(layout) };
            let Some(table) = std::ptr::NonNull::new(p.cast::<A>()) else { std::alloc::handle_alloc_error(layout) };
            Self { table }
        }
    }
}

impl<A> std::ops::Deref for ZeroedTable<A> {
    type Target = A;

    #[inline(always)]
    fn deref(&self) -> &A {
        // SAFETY: the table is valid (all zero when made, the caller's promise) and lives
        // as long as `self`.
        unsafe { self.table.as_ref() }
    }
}

impl<A> Drop for ZeroedTable<A> {
    fn drop(&mut self) {
        // SAFETY: the table is dropped in place once, then its memory given back exactly
        // as it was taken.
        unsafe {
            std::ptr::drop_in_place(self.table.as_ptr());
            #[cfg(target_os = "linux")]
            libc::munmap(self.table.as_ptr().cast(), std::mem::size_of::<A>().next_multiple_of(page_size()));
            #[cfg(not(target_os = "linux"))]
            std::alloc::dealloc(self.table.as_ptr().cast(), std::alloc::Layout::new::<A>());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ZeroedTable;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_zeroed_table_is_zero_writable_and_given_back() {
        for round in 0..40u64 {
            // SAFETY: zero is a valid AtomicU64.
            let t: ZeroedTable<[AtomicU64; 1 << 19]> = unsafe { ZeroedTable::new_zeroed() };
            assert!(t.iter().all(|x| x.load(Ordering::Relaxed) == 0));
            #[cfg(target_os = "linux")]
            assert_eq!(t.as_ptr() as usize % super::HUGE, 0, "starts on a 2 MiB boundary");
            for (i, x) in t.iter().enumerate().step_by(511) {
                x.store(i as u64 ^ round, Ordering::Relaxed);
            }
            for (i, x) in t.iter().enumerate() {
                assert_eq!(x.load(Ordering::Relaxed), if i % 511 == 0 { i as u64 ^ round } else { 0 });
            }
        }
    }

    /// The kernel's flags for the mapping that holds `addr`, from `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn mapping_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-').filter(|(a, b)| a.len() >= 8 && b.chars().all(|c| c.is_ascii_hexdigit())) {
                let (a, b) = (usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?);
                inside = (a..b).contains(&addr);
            } else if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_zeroed_table_is_advised_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        // SAFETY: zero is a valid u64.
        let t: ZeroedTable<[u64; 1 << 20]> = unsafe { ZeroedTable::new_zeroed() };
        let flags = mapping_flags(t.as_ptr() as usize).expect("the table's mapping is listed");
        assert!(flags.split_whitespace().any(|f| f == "hg"), "no MADV_HUGEPAGE on the table: {flags}");
    }

    #[test]
    fn a_table_of_an_odd_size_keeps_its_last_bytes() {
        // SAFETY: zero is a valid u8.
        let t: ZeroedTable<[u8; 3 * 4096 + 5]> = unsafe { ZeroedTable::new_zeroed() };
        assert_eq!(t.len(), 3 * 4096 + 5);
        assert!(t.iter().all(|&b| b == 0));
        assert_eq!(t[3 * 4096 + 4], 0);
    }
}
