//! Names the target configurations once, so the code says `#[cfg(web)]` / `#[cfg(native)]` /
//! `#[cfg(cuda)]`; and writes the WGSL shaders without their comments into `OUT_DIR/shaders/`,
//! which the crate includes: the browser package carries every shader's text, and the comments
//! are for people reading `shaders/`. Marker lines (`// @...`), which the templates rewrite,
//! stay.
use std::path::Path;

fn main() {
    cfg_aliases::cfg_aliases! {
        web: { target_arch = "wasm32" },
        native: { not(target_arch = "wasm32") },
        cuda: { all(feature = "cuda", not(target_arch = "wasm32")) },
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shaders");
    if let Err(e) = strip_shaders() {
        println!("cargo::error=could not prepare the shaders: {e}");
    }
}

fn strip_shaders() -> std::io::Result<()> {
    let out_dir = std::env::var_os("OUT_DIR").ok_or(std::io::ErrorKind::NotFound)?;
    let out = Path::new(&out_dir).join("shaders");
    std::fs::create_dir_all(&out)?;
    for entry in std::fs::read_dir("shaders")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            let text = std::fs::read_to_string(&path)?;
            let name = path.file_name().ok_or(std::io::ErrorKind::NotFound)?;
            std::fs::write(out.join(name), strip(&text))?;
        }
    }
    Ok(())
}

/// WGSL has no string literals, so `//` always starts a comment.
fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        // Indentation goes too (the browser package carries the text); marker lines stay whole.
        let code = if line.trim_start().starts_with("// @") {
            line
        } else {
            line.split("//").next().unwrap_or("").trim()
        };
        if !code.trim().is_empty() {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}
