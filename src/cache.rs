//! gpukit's small on-disk caches (native only; in the browser they live in memory for the
//! page's lifetime): `$GPUKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/gpukit`, else
//! `~/.cache/gpukit`. Writes are best effort: a read-only home only costs a re-measurement.

#[cfg(native)]
use serde::{de::DeserializeOwned, Serialize};

/// The path of cache file `name`.
#[cfg(native)]
pub(crate) fn path(name: &str) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let dir = if let Some(d) = std::env::var_os("GPUKIT_CACHE_DIR") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(d).join("gpukit")
    } else {
        PathBuf::from(std::env::var_os("HOME")?).join(".cache/gpukit")
    };
    Some(dir.join(name))
}

/// The value stored at `p`; the default when there is no readable, well-formed file.
#[cfg(native)]
pub(crate) fn load_from<T: DeserializeOwned + Default>(p: &std::path::Path) -> T {
    let Ok(text) = std::fs::read_to_string(p) else {
        return T::default();
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        log::warn!("gpukit: ignoring {} ({e})", p.display());
        T::default()
    })
}

/// Replaces the file by a rename, so concurrent processes never read half a file.
#[cfg(native)]
pub(crate) fn save_to<T: Serialize>(p: &std::path::Path, value: &T) -> std::io::Result<()> {
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = p.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)?;
    std::fs::rename(&tmp, p)
}

/// Saves `value` as cache file `name`, logging (not failing) when it cannot.
#[cfg(native)]
pub(crate) fn save<T: Serialize>(name: &str, value: &T) {
    if let Some(p) = path(name) {
        if let Err(e) = save_to(&p, value) {
            log::warn!("gpukit: could not save {}: {e}", p.display());
        }
    }
}

/// FNV-1a: a hash that is the same in every build, for cache file names.
pub(crate) fn stable_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
