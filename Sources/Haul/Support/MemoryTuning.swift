import CHaulShims

/// Process-wide allocator settings for programs built on Haul, such as the `haul` tool.
///
/// Not applied by the library itself: changing how the process allocates is the
/// program's decision.
package enum MemoryTuning {
    /// Keeps up to 16 MiB of freed heap instead of returning it to the kernel (glibc's
    /// `M_TRIM_THRESHOLD`), and serves blocks of up to 4 MiB from the heap rather than from
    /// fresh mappings (`M_MMAP_THRESHOLD`); nothing elsewhere.
    ///
    /// Body parts are held in batches of 1 MiB before they are written. With glibc's
    /// default 128 KiB trim threshold, each freed batch gives its pages back, and the next
    /// receive buffers fault them in again, zeroed: about 15% more CPU for a fast download.
    /// Setting the trim threshold also stops glibc from raising its mmap threshold as it
    /// would otherwise, which left every buffer of 128 KiB or more (TLS records are
    /// decrypted into such buffers) mapped and unmapped each time: page faults took more
    /// than half of an event loop's time, and a 1 GiB download over HTTPS 2.3× as long.
    package static func keepFreedMemory() {
        _ = chaul_keep_freed_memory(16 << 20, 4 << 20)
    }
}
