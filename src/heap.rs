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
/// what the daemon's data costs, apart from what the allocator keeps around it. `mallinfo2` is
/// looked up when first asked for: glibc has it from 2.33, and the wheel's build links against
/// 2.17 (older systems have only `mallinfo`, whose 32-bit counters wrap).
pub fn in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        type MallInfo2 = unsafe extern "C" fn() -> libc::mallinfo2;
        static FOUND: std::sync::OnceLock<Option<MallInfo2>> = std::sync::OnceLock::new();
        let found = FOUND.get_or_init(|| {
            // SAFETY: a lookup by a NUL-terminated name in the objects already loaded.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
            // SAFETY: glibc's mallinfo2 has this signature.
            (!symbol.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, MallInfo2>(symbol) })
        });
        // SAFETY: mallinfo2 only reads the allocator's counters.
        found.map(|mallinfo2| {
            let info = unsafe { mallinfo2() };
            (info.uordblks + info.hblkhd) as u64
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}
