import CHaulShims

/// Process-wide allocator settings for programs built on Haul, such as the `haul` tool.
///
/// Not applied by the library itself: changing how the process allocates is the
/// program's decision.
package enum MemoryTuning {
    /// Keeps up to 16 MiB of freed heap instead of returning it to the kernel (glibc's
    /// `M_TRIM_THRESHOLD`; nothing elsewhere).
    ///
    /// Body parts are held in batches of 1 MiB before they are written. With glibc's
    /// default 128 KiB threshold, each freed batch gives its pages back, and the next
    /// receive buffers fault them in again, zeroed: about 15% more CPU for a fast download.
    package static func keepFreedMemory() {
        _ = chaul_keep_freed_memory(16 << 20)
    }
}
