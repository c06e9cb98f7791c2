//! Giving memory back: the allocator keeps the high-water mark of every thread that once held a
//! lot (a large document parsed, a huge listing made), which would show as the daemon's size for
//! good. After such work, free memory is returned to the system.

/// Return the heap's free memory to the system.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the heap holds for the daemon (allocated, not yet freed), where the allocator says:
/// what the daemon's data costs, apart from what the allocator keeps around it.
pub fn in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}
