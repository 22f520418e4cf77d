//! Bind groups, cached by the exact buffer ranges they bind.
//!
//! The pool hands out the same buffers in the same order when the same work repeats (an
//! inference step, a benchmark loop, a chain of ops), and parameters land at the same offsets of
//! the parameter buffer, so a repeated dispatch finds its bind group here instead of creating
//! one. The cache holds its buffers alive; it is bounded and cleared with the pool.

use std::collections::HashMap;

use super::pipelines::Layout;

/// How many bind groups are kept before the cache starts over.
const CAPACITY: usize = 512;

/// One bound range: the buffer (hashed by identity), offset and size in bytes.
pub(crate) type Range = (wgpu::Buffer, u64, u64);

#[derive(Hash, PartialEq, Eq)]
struct Key {
    layout: Layout,
    ranges: Vec<Range>,
}

#[derive(Default)]
pub(crate) struct BindGroupCache {
    groups: HashMap<Key, wgpu::BindGroup>,
    hits: u64,
}

impl BindGroupCache {
    /// The bind group for `ranges` (binding 0, 1, ... in order) under `layout`.
    pub(crate) fn get(
        &mut self,
        device: &wgpu::Device,
        layout: Layout,
        bgl: &wgpu::BindGroupLayout,
        ranges: Vec<Range>,
    ) -> wgpu::BindGroup {
        let key = Key { layout, ranges };
        if let Some(g) = self.groups.get(&key) {
            self.hits += 1;
            return g.clone();
        }
        let entries: Vec<wgpu::BindGroupEntry<'_>> = key
            .ranges
            .iter()
            .enumerate()
            .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    size: std::num::NonZeroU64::new(*size),
                }),
            })
            .collect();
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("gpukit"),
            layout: bgl,
            entries: &entries,
        });
        drop(entries);
        if self.groups.len() >= CAPACITY {
            self.groups.clear();
        }
        self.groups.insert(key, group.clone());
        group
    }

    /// Bind groups served from the cache so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }

    pub(crate) fn clear(&mut self) {
        self.groups.clear();
    }
}
