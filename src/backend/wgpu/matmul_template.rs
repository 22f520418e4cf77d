//! The matmul template: shaders/matmul.wgsl specialised to a tile configuration and an
//! arithmetic (f32, f16, or f32 on f16-rounded inputs).

use crate::error::{Error, Result};
use crate::ops::{MatmulTile, Precision};

use super::pipelines::Shader;

/// The arithmetic of a tiled matmul kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Arith {
    /// f32 tiles and multiply-adds.
    F32,
    /// f16 tiles and multiply-adds within a k tile (shader-f16).
    F16,
    /// Inputs rounded to f16, f32 arithmetic: `Precision::F16` without shader-f16.
    F16Rounded,
}

impl Arith {
    /// The arithmetic that runs `precision` on a device with or without shader-f16.
    pub(crate) fn of(precision: Precision, shader_f16: bool) -> Arith {
        match (precision, shader_f16) {
            // WGSL has neither TF32 nor bf16: exact f32 is within both tolerances.
            (Precision::F32 | Precision::Tf32 | Precision::Bf16, _) => Arith::F32,
            (Precision::F16, true) => Arith::F16,
            (Precision::F16, false) => Arith::F16Rounded,
        }
    }
}

/// shaders/matmul.wgsl specialised to a tile configuration and arithmetic: its `tile:` lines
/// (and the element type) rewritten and its `@generate` lines replaced by unrolled code.
/// Errors if the template lost a line it rewrites.
pub(crate) fn matmul_source(tile: MatmulTile, arith: Arith) -> Result<String> {
    use std::fmt::Write;
    let template = Shader::Matmul.source();
    let f16 = arith == Arith::F16;
    let consts = [
        (
            "alias T = f32;",
            if f16 {
                "alias T = f16;"
            } else {
                "alias T = f32;"
            }
            .to_string(),
        ),
        (
            "const RM: u32 = 4u;",
            format!("const RM: u32 = {}u;", tile.rows),
        ),
        (
            "const RN: u32 = 4u;",
            format!("const RN: u32 = {}u;", tile.cols),
        ),
        (
            "const TK: u32 = 16u;",
            format!("const TK: u32 = {}u;", tile.depth),
        ),
        (
            "const SPLIT: bool = false;",
            format!("const SPLIT: bool = {f16};"),
        ),
        (
            "const ROUND16: bool = false;",
            format!("const ROUND16: bool = {};", arith == Arith::F16Rounded),
        ),
    ];
    let (rows, cols) = (tile.rows, tile.cols / 4);
    let cells = || (0..rows).flat_map(move |r| (0..cols).map(move |c| (r, c)));
    // Each @generate line becomes these statements (at the line's indentation).
    let generate = |what: &str| -> Option<Vec<String>> {
        let mut out = Vec::new();
        match what {
            "declare" => {
                for (r, c) in cells() {
                    out.push(format!("var acc_{r}_{c} = vec4<f32>(0.0);"));
                    if f16 {
                        out.push(format!("var part_{r}_{c} = vec4<T>(0.0);"));
                    }
                }
            }
            "zero" => {
                if f16 {
                    out.extend(cells().map(|(r, c)| format!("part_{r}_{c} = vec4<T>(0.0);")));
                }
            }
            "fma" => {
                for c in 0..cols {
                    out.push(format!(
                        "let b_{c} = b_tile[kk * BV + lid.x + {}u];",
                        16 * c
                    ));
                }
                for i in 0..rows / 4 {
                    out.push(format!("let a_{i} = a_tile[kk * AV + lid.y * RV + {i}u];"));
                }
                for (r, c) in cells() {
                    let a = format!("a_{}.{}", r / 4, ["x", "y", "z", "w"][r as usize % 4]);
                    out.push(if f16 {
                        format!("part_{r}_{c} = fma(vec4<T>({a}), b_{c}, part_{r}_{c});")
                    } else {
                        format!("acc_{r}_{c} = fma(vec4<f32>({a}), b_{c}, acc_{r}_{c});")
                    });
                }
            }
            "sum" => {
                if f16 {
                    out.extend(cells().map(|(r, c)| {
                        format!("acc_{r}_{c} = acc_{r}_{c} + vec4<f32>(part_{r}_{c});")
                    }));
                }
            }
            "store" => {
                out.extend(cells().map(|(r, c)| {
                    format!(
                        "store4(out_base, row0 + lid.y * RM + {r}u, col0 + (lid.x + {}u) * 4u, acc_{r}_{c});",
                        16 * c
                    )
                }));
            }
            _ => return None,
        }
        Some(out)
    };
    let mut source = String::with_capacity(template.len() * 2);
    if f16 {
        source.push_str("enable f16;\n");
    }
    let (mut found, mut generated) = (0, 0);
    for line in template.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("// @generate ") {
            let what = rest.split(':').next().unwrap_or("");
            let Some(statements) = generate(what) else {
                return Err(Error::ShaderCompilation {
                    shader: Shader::Matmul.file(),
                    detail: format!("template: unknown @generate {what:?}"),
                });
            };
            let indent = &line[..line.len() - trimmed.len()];
            for st in statements {
                let _ = writeln!(source, "{indent}{st}");
            }
            generated += 1;
            continue;
        }
        match consts.iter().find(|(from, _)| line.starts_with(from)) {
            Some((from, to)) => {
                source.push_str(to);
                source.push_str(&line[from.len()..]);
                found += 1;
            }
            None => source.push_str(line),
        }
        source.push('\n');
    }
    if found != consts.len() || generated != 5 {
        return Err(Error::ShaderCompilation {
            shader: Shader::Matmul.file(),
            detail: format!(
                "template: {found} of {} tile lines and {generated} of 5 @generate lines found",
                consts.len()
            ),
        });
    }
    Ok(source)
}
