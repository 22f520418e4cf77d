//! Names the target configurations once, so the code says `#[cfg(web)]` / `#[cfg(native)]` / `#[cfg(cuda)]`.
fn main() {
    cfg_aliases::cfg_aliases! {
        web: { target_arch = "wasm32" },
        native: { not(target_arch = "wasm32") },
        cuda: { all(feature = "cuda", not(target_arch = "wasm32")) },
    }
}
