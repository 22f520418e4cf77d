//! How the CPU backend splits work: rayon's global pool natively, one thread in wasm (threads
//! in the browser need cross-origin isolation and a nightly build with atomics; see the
//! README), so every kernel is written against these two helpers only.

/// Elements below which a task is not worth handing to another thread (waking one costs
/// microseconds; 64K adds take about 20).
pub(super) const GRAIN: usize = 1 << 16;

/// Threads the CPU backend uses.
pub(crate) fn threads() -> usize {
    #[cfg(native)]
    {
        rayon::current_num_threads()
    }
    #[cfg(web)]
    {
        1
    }
}

/// Runs `f` on one of the pool's threads, so that the parallel kernels of a sequence of ops
/// split their work with the other threads directly: called from outside the pool, every
/// parallel op hands its work over and sleeps until it is done.
#[cfg(native)]
pub(crate) fn in_pool<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if rayon::current_thread_index().is_none() && threads() > 1 {
        return rayon::scope(|_| f());
    }
    f()
}

/// Calls `f(first_index, chunk)` for consecutive chunks of `out` of `chunk` elements (the last
/// may be shorter), on several threads natively when there are at least four chunks.
pub(super) fn chunks_mut<T: Send>(
    out: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    let chunk = chunk.max(1);
    #[cfg(native)]
    if out.len() >= 4 * chunk && threads() > 1 {
        use rayon::prelude::*;
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i * chunk, c));
        return;
    }
    for (i, c) in out.chunks_mut(chunk).enumerate() {
        f(i * chunk, c);
    }
}

/// Calls `f(i)` for every `i < count`, on several threads natively when there are at least
/// two.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) fn for_each(count: usize, f: impl Fn(usize) + Send + Sync) {
    #[cfg(native)]
    if count >= 2 && threads() > 1 {
        use rayon::prelude::*;
        (0..count).into_par_iter().for_each(f);
        return;
    }
    (0..count).for_each(f);
}

/// [`chunks_mut`] with a fallible `f`: the first error any chunk returns (the other chunks
/// still run).
pub(super) fn try_chunks_mut<T: Send, E: Send>(
    out: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) -> Result<(), E> + Send + Sync,
) -> Result<(), E> {
    let failed = std::sync::Mutex::new(None);
    chunks_mut(out, chunk, |start, c| {
        if let Err(e) = f(start, c) {
            failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Like [`chunks_mut`] over rows of `width` elements: `f(first_row, rows)` gets whole rows,
/// about [`GRAIN`] elements (at least one row) at a time.
pub(super) fn rows_mut<T: Send>(
    out: &mut [T],
    width: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    if width == 0 {
        return;
    }
    let rows = (GRAIN / width).max(1);
    chunks_mut(out, rows * width, |start, c| f(start / width, c));
}

/// Like [`rows_mut`] with a fixed number of rows per task (for rows that are costly each).
pub(super) fn rows_each_mut<T: Send>(
    out: &mut [T],
    width: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    if width == 0 {
        return;
    }
    chunks_mut(out, width, |start, c| f(start / width, c));
}
