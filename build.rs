//! Names the target configurations once, so the code says `#[cfg(web)]` / `#[cfg(native)]` /
//! `#[cfg(cuda)]`; and assembles the WGSL shaders into `OUT_DIR/shaders/`, which the crate
//! includes. WGSL has no includes, so each `// @include NAME` line is replaced here by
//! `shaders/include/NAME.wgsl` (which may include others); the assembled modules are what naga
//! validates and what pipelines compile. Comments go (the browser package carries every
//! shader's text; the comments are for people reading `shaders/`); the other marker lines
//! (`// @...`), which the templates rewrite at run time, stay, except `// @native-only` and
//! `// @native-end`: the lines between them are left out of the browser build's text (code
//! for paths that build never takes, which its size budget need not carry). Then the
//! functions, parameters, constants and variables the modules declare get names of two
//! characters, the same in every module (`short_names`): 636 bytes of the gzipped browser
//! package. Natively too, so that naga's validation of every kernel and the op suite on
//! lavapipe check the text the browser runs; a shader error's message names the short names.
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
    let mut modules = Vec::new();
    for (dir, to) in [
        ("shaders", out.clone()),
        ("shaders/include", out.join("include")),
    ] {
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            paths.push(entry?.path());
        }
        paths.sort();
        for path in paths {
            if path.extension().is_some_and(|e| e == "wgsl") {
                let text = assemble(&std::fs::read_to_string(&path)?, 0)?;
                let name = path.file_name().ok_or(std::io::ErrorKind::NotFound)?;
                let kept = dir != "shaders" || KEPT_NAMES.iter().any(|k| name == *k);
                // Of the includes, only the two the fused kernels read name anything others use.
                let named = KEPT_NAMES.iter().any(|k| name == *k)
                    || ["unary_op.wgsl", "fused_ieee.wgsl"]
                        .iter()
                        .any(|k| name == *k);
                modules.push((to.join(name), strip(&text, web)?, kept, named));
            }
        }
    }
    let short = short_names(&modules);
    for (path, text, kept, _) in &modules {
        let text = if *kept {
            text.clone()
        } else {
            rename(text, &short)
        };
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// The modules whose names other code uses: the matmul templates (their generators write
/// statements naming the templates' variables and functions) and elementwise_unary.wgsl (the
/// fused kernels' generator calls its functions); shaders/include's files are written
/// unrenamed too (the fused kernels include two of them at run time).
const KEPT_NAMES: [&str; 3] = ["matmul.wgsl", "matmul_coop.wgsl", "elementwise_unary.wgsl"];

/// The identifiers, numbers and other characters of WGSL text, in order.
fn tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        if bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' {
            // Identifiers and numbers (`0x7fc00000u`, `1e5f`) alike run to the next other
            // character, so no identifier is found inside a number.
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&text[start..i]);
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// Short names for the functions, parameters, constants and variables the renamable modules
/// declare, the same in every module (the package's gzip finds a name repeated across
/// modules as it finds it within one): the most frequent long names get the shortest, a
/// letter and a digit (no WGSL keyword or type has that form), each new to every module.
/// Left alone: entry points and overrides (the pipelines name them), struct members (and
/// every word after a `.`: members and swizzles), names something calls that no module
/// declares as a function (WGSL's built-ins), and every name in the kept modules.
fn short_names(modules: &[(std::path::PathBuf, String, bool, bool)]) -> Vec<(String, String)> {
    use std::collections::{HashMap, HashSet};
    let mut declared = HashSet::new();
    let mut functions = HashSet::new();
    let mut protect: HashSet<&str> = HashSet::new();
    let mut called = HashSet::new();
    let mut count: HashMap<&str, usize> = HashMap::new();
    let mut every = HashSet::new();
    for (_, text, kept, named) in modules {
        let toks = tokens(text);
        every.extend(toks.iter().copied());
        if *named {
            protect.extend(toks.iter().copied().filter(|t| is_ident(t)));
            continue;
        }
        if *kept {
            continue;
        }
        let words: Vec<&str> = toks
            .iter()
            .copied()
            .filter(|t| !t.trim().is_empty())
            .collect();
        let mut in_struct = false;
        let mut compute = false;
        // After `var`: the name is the first word past its optional `<space, access>`.
        let mut after_var = false;
        let mut in_angle = false;
        for (i, &t) in words.iter().enumerate() {
            let next = words.get(i + 1).copied().unwrap_or("");
            let prev = if i > 0 { words[i - 1] } else { "" };
            match t {
                "struct" => in_struct = true,
                "}" if in_struct => in_struct = false,
                "compute" if prev == "@" => compute = true,
                "fn" if is_ident(next) => {
                    if compute {
                        protect.insert(next);
                        compute = false;
                    } else {
                        functions.insert(next);
                        declared.insert(next);
                    }
                }
                "override" if is_ident(next) => {
                    protect.insert(next);
                }
                "let" | "const" if is_ident(next) => {
                    declared.insert(next);
                }
                _ => {}
            }
            if after_var {
                match t {
                    "<" => in_angle = true,
                    ">" => in_angle = false,
                    _ if !in_angle && is_ident(t) => {
                        declared.insert(t);
                        after_var = false;
                    }
                    _ => {}
                }
            }
            if t == "var" {
                after_var = true;
            }
            if is_ident(t) {
                *count.entry(t).or_default() += 1;
                if next == "(" {
                    called.insert(t);
                }
                // Struct members and words after a `.` (members, swizzles) stay; a parameter
                // `name: type` is declared.
                if in_struct || prev == "." {
                    protect.insert(t);
                } else if next == ":" && (prev == "(" || prev == ",") {
                    declared.insert(t);
                }
            }
        }
    }
    let mut names: Vec<&str> = declared
        .into_iter()
        .filter(|n| !protect.contains(n) && (!called.contains(n) || functions.contains(n)))
        .filter(|n| n.len() > 2)
        .collect();
    names.sort_by_key(|n| {
        (
            std::cmp::Reverse(count.get(n).copied().unwrap_or(0) * n.len()),
            *n,
        )
    });
    let mut out = Vec::new();
    let mut i = 0usize;
    for n in names {
        let short = loop {
            let candidate = format!("{}{}", (b'a' + (i % 26) as u8) as char, i / 26);
            i += 1;
            if !every.contains(candidate.as_str()) {
                break candidate;
            }
        };
        if short.len() < n.len() {
            out.push((n.to_string(), short));
        }
    }
    out
}

/// `text` with each identifier `short` names replaced, except after a `.`.
fn rename(text: &str, short: &[(String, String)]) -> String {
    let map: std::collections::HashMap<&str, &str> = short
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let mut out = String::with_capacity(text.len());
    let mut prev = "";
    for t in tokens(text) {
        match map.get(t) {
            Some(s) if prev != "." => out.push_str(s),
            _ => out.push_str(t),
        }
        if !t.trim().is_empty() {
            prev = t;
        }
    }
    out
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
