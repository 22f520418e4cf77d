//! The CUDA device memory pool: allocations by size class (the wgpu pool's classes, so no
//! buffer wastes more than a quarter of itself), kept for reuse when a tensor drops, with
//! statistics and an optional limit on the bytes the pool holds.
//!
//! Every kernel runs on the backend's one stream, so a buffer given back may be handed to the
//! next op at once: stream order puts the new writer after every earlier reader. While a batch
//! is captured as a CUDA graph, buffers given back are kept for the graph instead (it replays
//! the same addresses later), and return to the pool when the graph is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::result as cu;

use super::errors;
use crate::backend::wgpu::pool::size_class;
use crate::error::{Error, Result};
use crate::MemoryStats;

#[derive(Default)]
pub(crate) struct Pool {
    free: HashMap<u64, Vec<u64>>,
    stats: MemoryStats,
    limit: Option<u64>,
    /// Bytes that dropped graphs will give back (held, but neither live nor reusable yet).
    kept_bytes: u64,
    /// While a graph is captured: the buffers given back during the capture.
    captured: Option<Vec<(u64, u64)>>,
}

/// A device allocation; gives itself back to the pool when dropped.
pub(crate) struct Buffer {
    ptr: u64,
    bytes: u64,
    pool: Arc<Mutex<Pool>>,
}

impl Buffer {
    pub(crate) fn ptr(&self) -> u64 {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        lock(&self.pool).give(self.ptr, self.bytes);
    }
}

pub(crate) fn lock(pool: &Mutex<Pool>) -> MutexGuard<'_, Pool> {
    pool.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A buffer of at least `bytes` from `pool` (the context must be current on this thread).
pub(crate) fn take(pool: &Arc<Mutex<Pool>>, bytes: u64) -> Result<Buffer> {
    let class = size_class(bytes);
    let ptr = lock(pool).take(class)?;
    Ok(Buffer {
        ptr,
        bytes: class,
        pool: pool.clone(),
    })
}

impl Pool {
    fn take(&mut self, class: u64) -> Result<u64> {
        if let Some(ptr) = self.free.get_mut(&class).and_then(Vec::pop) {
            self.stats.reuses += 1;
            self.stats.pooled_bytes -= class;
            self.note_live(class);
            return Ok(ptr);
        }
        if let Some(limit) = self.limit {
            if self.held() + class > limit {
                self.release();
            }
            if self.held() + class > limit {
                return Err(Error::OutOfMemory {
                    detail: format!(
                        "{class} more bytes would exceed the pool's limit of {limit} bytes \
                         ({} in use; Device::set_memory_limit)",
                        self.stats.live_bytes
                    ),
                });
            }
        }
        // SAFETY: a plain allocation; the caller made the backend's context current.
        let ptr = match unsafe { cu::malloc_sync(class as usize) } {
            Ok(p) => p,
            Err(e) if errors::is_out_of_memory(&e) && self.stats.pooled_bytes > 0 => {
                // Free what the pool keeps and try once more before giving up.
                self.release();
                unsafe { cu::malloc_sync(class as usize) }.map_err(errors::driver)?
            }
            Err(e) => return Err(errors::driver(e)),
        };
        self.stats.allocations += 1;
        self.note_live(class);
        Ok(ptr)
    }

    fn note_live(&mut self, class: u64) {
        self.stats.live_bytes += class;
        self.stats.peak_live_bytes = self.stats.peak_live_bytes.max(self.stats.live_bytes);
    }

    fn held(&self) -> u64 {
        self.stats.live_bytes + self.stats.pooled_bytes + self.kept_bytes
    }

    fn give(&mut self, ptr: u64, class: u64) {
        self.stats.live_bytes -= class;
        if let Some(kept) = self.captured.as_mut() {
            // Still held: a graph may replay writes to it.
            self.kept_bytes += class;
            kept.push((ptr, class));
            return;
        }
        self.stats.pooled_bytes += class;
        self.free.entry(class).or_default().push(ptr);
    }

    /// Frees every pooled buffer (live tensors keep theirs).
    pub(crate) fn release(&mut self) {
        for (_, ptrs) in self.free.drain() {
            for p in ptrs {
                // SAFETY: pooled buffers belong to no tensor; a failure leaves a leak, not a
                // dangling use.
                if let Err(e) = unsafe { cu::free_sync(p) } {
                    log::warn!("gpukit: cuMemFree failed: {e}");
                }
            }
        }
        self.stats.pooled_bytes = 0;
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.stats
    }

    pub(crate) fn reset_peak(&mut self) {
        self.stats.peak_live_bytes = self.stats.live_bytes;
    }

    pub(crate) fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }

    /// Starts keeping given-back buffers for a graph being captured.
    pub(crate) fn begin_capture(&mut self) {
        self.captured = Some(Vec::new());
    }

    /// Ends a capture: the buffers given back during it, which the graph owns from now on.
    pub(crate) fn end_capture(&mut self) -> Vec<(u64, u64)> {
        self.captured.take().unwrap_or_default()
    }

    /// A dropped graph's buffers become reusable.
    pub(crate) fn reclaim(&mut self, kept: Vec<(u64, u64)>) {
        for (ptr, class) in kept {
            self.kept_bytes -= class;
            self.stats.pooled_bytes += class;
            self.free.entry(class).or_default().push(ptr);
        }
    }
}
