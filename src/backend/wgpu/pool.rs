//! Device buffers pooled by size class, and the staging buffers that read backs map.
//!
//! Size classes are 256 bytes and up, in quarter steps between powers of two (256, 320, 384,
//! 448, 512, 640, ...), so no buffer wastes more than a quarter of itself. A buffer given back is
//! *retired* first while work is pending and becomes reusable only after the next submit: work
//! already recorded but not yet submitted may still read it, and `queue.write_buffer` (used for
//! uploads) runs before the command buffers of the submit it belongs to.

use std::collections::HashMap;

pub(crate) use crate::stats::MemoryStats;

/// Usage of every tensor buffer: read and written by kernels, copied for uploads and read backs.
pub(crate) const TENSOR_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// The smallest size class that holds `bytes` (`u64::MAX`, larger than any device's
/// `max_buffer_size`, when no power of two holds it).
pub(crate) fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(256);
    let Some(pow) = bytes.checked_next_power_of_two() else {
        return u64::MAX;
    };
    if pow == bytes {
        return bytes;
    }
    let quarter = pow / 8; // classes between pow/2 and pow step by pow/8
    bytes.div_ceil(quarter) * quarter
}

#[derive(Default)]
pub(crate) struct BufferPool {
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    retired: Vec<wgpu::Buffer>,
    retired_bytes: u64,
    staging: Vec<wgpu::Buffer>,
    stats: MemoryStats,
}

impl BufferPool {
    /// A tensor buffer of at least `bytes`, from the pool or new.
    pub(crate) fn take(&mut self, device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
        let class = size_class(bytes);
        let buffer = match self.free.get_mut(&class).and_then(Vec::pop) {
            Some(b) => {
                self.stats.reuses += 1;
                self.stats.pooled_bytes -= class;
                b
            }
            None => {
                self.stats.allocations += 1;
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("gpukit tensor"),
                    size: class,
                    usage: TENSOR_USAGE,
                    mapped_at_creation: false,
                })
            }
        };
        self.stats.live_bytes += class;
        self.stats.peak_live_bytes = self.stats.peak_live_bytes.max(self.stats.live_bytes);
        buffer
    }

    /// Gives a buffer back. With work pending it is reused after the next submit; with none,
    /// no unsubmitted command can refer to it and it is reusable at once.
    pub(crate) fn retire(&mut self, buffer: wgpu::Buffer, pending: bool) {
        self.stats.live_bytes -= buffer.size();
        if pending {
            self.retired_bytes += buffer.size();
            self.retired.push(buffer);
        } else {
            self.stats.pooled_bytes += buffer.size();
            self.free.entry(buffer.size()).or_default().push(buffer);
        }
    }

    /// Bytes retired since the last submit.
    pub(crate) fn retired_bytes(&self) -> u64 {
        self.retired_bytes
    }

    /// Called after a submit: retired buffers become reusable.
    pub(crate) fn submitted(&mut self) {
        for b in self.retired.drain(..) {
            self.stats.pooled_bytes += b.size();
            self.free.entry(b.size()).or_default().push(b);
        }
        self.retired_bytes = 0;
    }

    /// A mappable buffer of at least `bytes` for a read back.
    pub(crate) fn take_staging(&mut self, device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
        match self.staging.iter().position(|b| b.size() >= bytes) {
            Some(i) => self.staging.swap_remove(i),
            None => device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit staging"),
                size: size_class(bytes),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        }
    }

    /// Returns an unmapped staging buffer for the next read back.
    pub(crate) fn return_staging(&mut self, buffer: wgpu::Buffer) {
        self.staging.push(buffer);
    }

    /// Drops every pooled buffer (tensors still alive keep theirs).
    pub(crate) fn release(&mut self) {
        self.free.clear();
        self.staging.clear();
        self.stats.pooled_bytes = 0;
    }

    pub(crate) fn reset_peak(&mut self) {
        self.stats.peak_live_bytes = self.stats.live_bytes;
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_waste_at_most_a_quarter() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
        assert_eq!(size_class(4096), 4096);
        assert_eq!(size_class(4097), 5120);
        for bytes in [300u64, 1000, 5000, 65537 * 4, 1 << 20 | 1, 3 << 28] {
            let c = size_class(bytes);
            assert!(
                c >= bytes && (c as f64) < bytes as f64 * 1.25 + 1.0,
                "{bytes} -> {c}"
            );
            assert_eq!(c % 64, 0);
        }
        // Beyond 2^63 no power of two fits: the class is larger than any limit, not a wrap.
        assert_eq!(size_class((1 << 63) + 1), u64::MAX);
        assert_eq!(size_class(u64::MAX), u64::MAX);
        assert_eq!(size_class(1 << 63), 1 << 63);
    }
}
