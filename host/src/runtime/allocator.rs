//! Gives the allocator's free pages back to the operating system.
//!
//! Compiling a component allocates hundreds of MiB on its own thread (a Python or
//! JavaScript component: ~60 MiB per model at peak) and frees them at the end. jemalloc
//! purges an arena's free pages only as that arena is used again, and the compile thread's
//! arena may never be: a server started with a cold compile cache kept 568 MiB with all of
//! 16 Python models unloaded, against 120 MiB for one started warm. So after a load the
//! pages every arena holds free are returned at once, and the server runs jemalloc's
//! background threads, which return what any arena leaves free after its decay time
//! (10 s): after an unload, a burst of large requests, a replaced instance.

/// Starts jemalloc's background purging (a no-op in a build without jemalloc). For the
/// server: a library user may not want the allocator's threads.
pub fn purge_in_background() {
    #[cfg(feature = "jemalloc")]
    {
        const BACKGROUND_THREAD: &[u8] = b"background_thread\0";
        let mut enable = true;
        // SAFETY: a NUL-terminated control name whose value is a C `bool`, written from a
        // live `bool` of that size; nothing is read.
        let failed = unsafe {
            tikv_jemalloc_sys::mallctl(
                BACKGROUND_THREAD.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&raw mut enable).cast(),
                std::mem::size_of::<bool>(),
            )
        };
        if failed != 0 {
            tracing::warn!(
                code = failed,
                "jemalloc's background purging could not start: freed memory returns to the OS only after loads"
            );
        }
    }
}

/// Returns the free pages of every allocator arena to the OS (jemalloc's
/// `arena.<all>.purge`; glibc's `malloc_trim` in a build without jemalloc). Takes
/// milliseconds: for after a load, not for the serving path.
pub fn release_free_memory() {
    #[cfg(feature = "jemalloc")]
    {
        // MALLCTL_ARENAS_ALL: the purge applies to every arena.
        const PURGE_ALL_ARENAS: &[u8] = b"arena.4096.purge\0";
        // SAFETY: a NUL-terminated control name, and no value read or written, which is
        // what this control takes; it only releases pages no allocation uses.
        let failed = unsafe {
            tikv_jemalloc_sys::mallctl(
                PURGE_ALL_ARENAS.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if failed != 0 {
            tracing::debug!(code = failed, "jemalloc refused to purge its arenas");
        }
    }
    #[cfg(not(feature = "jemalloc"))]
    // SAFETY: malloc_trim only returns free heap memory; 0 keeps no padding.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn releasing_free_memory_leaves_allocations_intact() {
        let kept = vec![7u8; 8 << 20];
        drop(vec![1u8; 64 << 20]);
        super::release_free_memory();
        assert!(kept.iter().all(|&b| b == 7));
    }
}
