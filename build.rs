//! Names the target configurations once, so the code says `#[cfg(web)]` / `#[cfg(native)]` /
//! `#[cfg(cuda)]`; and assembles the WGSL shaders into `OUT_DIR/shaders/`, which the crate
//! includes. WGSL has no includes, so each `// @include NAME` line is replaced here by
//! `shaders/include/NAME.wgsl` (which may include others); the assembled modules are what naga
//! validates and what pipelines compile. Comments go (the browser package carries every
//! shader's text; the comments are for people reading `shaders/`); the other marker lines
//! (`// @...`), which the templates rewrite at run time, stay, except `// @native-only` and
//! `// @native-end`: the lines between them are left out of the browser build's text (code
//! for paths that build never takes, which its size budget need not carry).
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
    let web = std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "wasm32");
    let out_dir = std::env::var_os("OUT_DIR").ok_or(std::io::ErrorKind::NotFound)?;
    let out = Path::new(&out_dir).join("shaders");
    std::fs::create_dir_all(out.join("include"))?;
    for (dir, to) in [
        ("shaders", out.clone()),
        ("shaders/include", out.join("include")),
    ] {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "wgsl") {
                let text = assemble(&std::fs::read_to_string(&path)?, 0)?;
                let name = path.file_name().ok_or(std::io::ErrorKind::NotFound)?;
                std::fs::write(to.join(name), strip(&text, web)?)?;
            }
        }
    }
    Ok(())
}

/// `text` with each `// @include NAME` line replaced by `shaders/include/NAME.wgsl`,
/// assembled the same way (at most 4 levels deep).
fn assemble(text: &str, depth: usize) -> std::io::Result<String> {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match line.trim_start().strip_prefix("// @include ") {
            Some(name) if depth < 4 => {
                let path = Path::new("shaders/include").join(format!("{}.wgsl", name.trim()));
                let part = std::fs::read_to_string(&path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
                })?;
                out.push_str(&assemble(&part, depth + 1)?);
            }
            Some(_) => {
                return Err(std::io::Error::other("@include nested more than 4 deep"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// WGSL has no string literals, so `//` always starts a comment. With `web`, the lines
/// between `// @native-only` and `// @native-end` go too (the markers always do).
fn strip(text: &str, web: bool) -> std::io::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut native_only = false;
    for line in text.lines() {
        let marker = line.trim_start();
        let (open, close) = (
            marker.starts_with("// @native-only"),
            marker.starts_with("// @native-end"),
        );
        if open || close {
            if open == native_only {
                return Err(std::io::Error::other(
                    "unpaired or nested `// @native-only` block",
                ));
            }
            native_only = open;
            continue;
        }
        if native_only && web {
            continue;
        }
        // Indentation goes too (the browser package carries the text); marker lines stay whole.
        let code = if line.trim_start().starts_with("// @") {
            line.to_string()
        } else {
            squeeze(line.split("//").next().unwrap_or("").trim())
        };
        if !code.trim().is_empty() {
            out.push_str(&code);
            out.push('\n');
        }
    }
    if native_only {
        return Err(std::io::Error::other(
            "`// @native-only` without `// @native-end`",
        ));
    }
    Ok(out)
}

/// `line` without the spaces beside punctuation and operators (`, ; { } ( ) [ ] : =` and
/// `+ - * / % < > & | ! ^ ~`: about 370 bytes of the gzipped browser package for the first
/// group, 250 more for the operators). A space between two operator characters stays, so no
/// two tokens merge into another (`a - -b`, `x = -1`, `a < <b`); WGSL's template lists are
/// found from tokens, not spaces, so `i < n && j > m` reads the same without them. `const` and
/// `alias` lines stay whole: the matmul templates find them by their text.
fn squeeze(line: &str) -> String {
    if line.starts_with("const ") || line.starts_with("alias ") {
        return line.to_string();
    }
    let op = |c: char| "+-*/%<>&|!^~=".contains(c);
    let tight = |c: char| ",;{}()[]:".contains(c) || op(c);
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let before = i.checked_sub(1).map(|j| chars[j]);
            let after = chars.get(i + 1).copied();
            let merges = before.is_some_and(op) && after.is_some_and(op);
            if (before.is_some_and(tight) || after.is_some_and(tight)) && !merges {
                continue;
            }
        }
        out.push(c);
    }
    out
}
