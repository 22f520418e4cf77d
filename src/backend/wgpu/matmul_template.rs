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
    /// Inputs rounded to f16, products on cooperative matrices (tensor cores), f32 sums:
    /// `Precision::F16` where the adapter has them (shaders/matmul_coop.wgsl).
    F16Coop,
    /// The cooperative-matrix kernel on f16 tensors: A, B and the output stored two halves to
    /// a word (vec4 rows only: k and n multiples of 4, nothing transposed, no epilogue).
    F16CoopHalves,
}

impl Arith {
    /// The arithmetic that runs `precision` on a device with or without shader-f16 and
    /// usable cooperative matrices.
    pub(crate) fn of(precision: Precision, shader_f16: bool, coop: bool) -> Arith {
        match precision {
            // WGSL has neither TF32 nor bf16: exact f32 is within both tolerances.
            Precision::F32 | Precision::Tf32 | Precision::Bf16 => Arith::F32,
            Precision::F16 if coop => Arith::F16Coop,
            Precision::F16 if shader_f16 => Arith::F16,
            Precision::F16 => Arith::F16Rounded,
        }
    }

    /// The tiles the autotuner times for this arithmetic.
    pub(crate) fn candidates(self) -> &'static [MatmulTile] {
        match self {
            Arith::F16Coop | Arith::F16CoopHalves => &COOP_CANDIDATES,
            _ => &MatmulTile::CANDIDATES,
        }
    }

    /// Whether this arithmetic's kernel has `tile`.
    pub(crate) fn has_tile(self, tile: MatmulTile) -> bool {
        match self {
            Arith::F16Coop | Arith::F16CoopHalves => {
                matches!(tile.rows, 4 | 8 | 16)
                    && matches!(tile.cols, 4 | 8 | 16)
                    && tile.rows * tile.cols <= 128
                    && matches!(tile.depth, 16 | 32)
            }
            _ => tile.supported(),
        }
    }

    /// Bytes of workgroup memory `tile` needs with this arithmetic.
    pub(crate) fn workgroup_bytes(self, tile: MatmulTile) -> u32 {
        match self {
            Arith::F16Coop | Arith::F16CoopHalves => {
                let (bm, bn, bk) = (tile.tile_m(), tile.tile_n(), tile.depth);
                2 * 2 * (bm * (bk + 8) + bk * (bn + 8)) + coop_threads(tile) * 8 * 4
            }
            _ => tile.workgroup_bytes(self == Arith::F16),
        }
    }

    /// Invocations per workgroup of `tile`'s kernel.
    pub(crate) fn threads(self, tile: MatmulTile) -> u32 {
        match self {
            Arith::F16Coop | Arith::F16CoopHalves => coop_threads(tile),
            _ => 256,
        }
    }
}

/// The cooperative-matrix tiles the autotuner times: 128 x 128 with k steps of 16 (the fastest
/// at 4096 on an H100 before the larger ones), 128 x 256 and 256 x 128 (fewer loads per
/// product), and smaller tiles for matrices that give the large ones too few workgroups.
const COOP_CANDIDATES: [MatmulTile; 7] = [
    MatmulTile::new(8, 8, 16),
    MatmulTile::new(8, 16, 16),
    MatmulTile::new(16, 8, 16),
    MatmulTile::new(8, 8, 32),
    MatmulTile::new(8, 4, 16),
    MatmulTile::new(4, 4, 16),
    MatmulTile::new(4, 4, 32),
];

/// How a cooperative-matrix tile splits over subgroups: (FM, FN, WN), each subgroup holding FM x
/// FN blocks of 16 x 16, two subgroups along m and WN along n. A 256-column tile gives each
/// subgroup 4 blocks along n (64 x 64 per subgroup), the others 2.
fn coop_layout(tile: MatmulTile) -> (u32, u32, u32) {
    let (bm, bn) = (tile.tile_m(), tile.tile_n());
    let fn_ = if bn >= 256 { 4 } else { 2 };
    (bm / 32, fn_, bn / (16 * fn_))
}

/// Two subgroups of 32 along m, WN along n.
fn coop_threads(tile: MatmulTile) -> u32 {
    64 * coop_layout(tile).2
}

/// shaders/matmul.wgsl specialised to a tile configuration and arithmetic: its `tile:` lines
/// (and the element type) rewritten and its `@generate` lines replaced by unrolled code.
/// Errors if the template lost a line it rewrites.
/// `vectors` (cooperative-matrix kernel only) reads A and B as vec4s: the caller checks that
/// k and n are multiples of 4 and neither operand is transposed.
pub(crate) fn matmul_source(tile: MatmulTile, arith: Arith, vectors: bool) -> Result<String> {
    if matches!(arith, Arith::F16Coop | Arith::F16CoopHalves) {
        // Cooperative matrices are native-only (`adapter::cooperative_matrix`): the browser
        // package carries neither this template nor its generator.
        #[cfg(native)]
        return coop_source(tile, vectors, arith == Arith::F16CoopHalves);
        #[cfg(web)]
        let _ = (tile, vectors);
        #[cfg(web)]
        return Err(Error::ShaderCompilation {
            shader: Shader::MatmulCoop.file(),
            detail: "cooperative matrices are native-only".into(),
        });
    }
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
    let generate = |what: &str, _arg: &str| -> Option<Vec<String>> {
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
                // In the browser the k steps of a k tile are unrolled, so each tile index is a
                // constant plus the invocation's id: the browser's compiler then sees it in
                // bounds and leaves out the clamp that WGSL's robustness puts on every index
                // it cannot (4096 through Dawn on an H200: 28.7 -> 33.1 TFLOP/s). Natively
                // (no such clamps) the loop was faster (BENCHMARKS.md).
                #[cfg(web)]
                let (steps, av, bv, ka, kb) = (tile.depth, 4 * tile.rows, 4 * tile.cols, "", "");
                #[cfg(native)]
                let (steps, av, bv, ka, kb) = (1, 0, 0, "kk * AV + ", "kk * BV + ");
                for kk in 0..steps {
                    out.push(
                        if cfg!(web) {
                            "{"
                        } else {
                            "for (var kk = 0u; kk < TK; kk = kk + 1u) {"
                        }
                        .into(),
                    );
                    for c in 0..cols {
                        let at = kk * bv + 16 * c;
                        out.push(format!("let b_{c} = b_tile[{kb}{at}u + lid.x];"));
                    }
                    for i in 0..rows / 4 {
                        let at = kk * av + i;
                        out.push(format!("let a_{i} = a_tile[{ka}{at}u + lid.y * RV];"));
                    }
                    for (r, c) in cells() {
                        let a = format!("a_{}.{}", r / 4, ["x", "y", "z", "w"][r as usize % 4]);
                        out.push(if f16 {
                            format!("part_{r}_{c} = fma(vec4<T>({a}), b_{c}, part_{r}_{c});")
                        } else {
                            format!("acc_{r}_{c} = fma(vec4<f32>({a}), b_{c}, acc_{r}_{c});")
                        });
                    }
                    out.push("}".into());
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
    let prefix = if f16 { "enable f16;\n" } else { "" };
    let shader = Shader::Matmul;
    expand(shader, shader.source(), prefix, &consts, generate, 5)
}

#[cfg(native)]
/// shaders/matmul_coop.wgsl specialised to a tile: BM x BN outputs per workgroup, k steps of
/// BK (`tile.tile_m()`, `tile.tile_n()`, `tile.depth`; [`Arith::has_tile`] says which).
pub(crate) fn coop_source(tile: MatmulTile, vectors: bool, halves: bool) -> Result<String> {
    if !Arith::F16Coop.has_tile(tile) {
        return Err(Error::ShaderCompilation {
            shader: Shader::MatmulCoop.file(),
            detail: format!("no cooperative-matrix kernel has tile {tile}"),
        });
    }
    let (bm, bn, bk) = (tile.tile_m(), tile.tile_n(), tile.depth);
    let (fm, fn_, wn) = coop_layout(tile);
    let threads = coop_threads(tile);
    let consts = [
        ("const BM: u32 = 128u;", format!("const BM: u32 = {bm}u;")),
        ("const BN: u32 = 128u;", format!("const BN: u32 = {bn}u;")),
        ("const BK: u32 = 16u;", format!("const BK: u32 = {bk}u;")),
        ("const WN: u32 = 4u;", format!("const WN: u32 = {wn}u;")),
        ("const FM: u32 = 4u;", format!("const FM: u32 = {fm}u;")),
        ("const FN: u32 = 2u;", format!("const FN: u32 = {fn_}u;")),
    ];
    // Each thread's share of a step's tiles, in slots of four values; the last slot of a
    // share that does not divide evenly is guarded.
    let (a_vecs, b_vecs) = (bm * bk / 4, bk * bn / 4);
    let slots = |vecs: u32| (0..vecs.div_ceil(threads)).map(move |i| (i, (i + 1) * threads > vecs));
    let blocks = || (0..fm).flat_map(move |i| (0..fn_).map(move |j| (i, j)));
    let slot = |vecs: u32, i: u32, partial: bool, body: String| {
        let e = format!("let e = tid + {}u;", i * threads);
        if partial {
            format!("{{ {e} if (e < {vecs}u) {{ {body} }} }}")
        } else {
            format!("{{ {e} {body} }}")
        }
    };
    let generate = |what: &str, arg: &str| -> Option<Vec<String>> {
        let mut out = Vec::new();
        match what {
            "declare" => {
                for (i, j) in blocks() {
                    out.push(format!("var acc_{i}_{j} = coop_mat16x16<f32, C>();"));
                }
                out.extend(slots(a_vecs).map(|(i, _)| format!("var pa_{i} = Slot();")));
                out.extend(slots(b_vecs).map(|(i, _)| format!("var pb_{i} = Slot();")));
            }
            "fetch" => {
                out.extend(slots(a_vecs).map(|(i, partial)| {
                    let at = format!("row0 + e / (BK / 4u), {arg} + (e % (BK / 4u)) * 4u");
                    slot(
                        a_vecs,
                        i,
                        partial,
                        format!("pa_{i} = fetch_a(a_base, {at});"),
                    )
                }));
                out.extend(slots(b_vecs).map(|(i, partial)| {
                    let at = format!("{arg} + e / (BN / 4u), col0 + (e % (BN / 4u)) * 4u");
                    slot(
                        b_vecs,
                        i,
                        partial,
                        format!("pb_{i} = fetch_b(b_base, {at});"),
                    )
                }));
            }
            "put" => {
                out.extend(slots(a_vecs).map(|(i, partial)| {
                    let at =
                        format!("{arg} * BM * LDA + (e / (BK / 4u)) * LDA + (e % (BK / 4u)) * 4u");
                    slot(a_vecs, i, partial, format!("put_a({at}, pa_{i});"))
                }));
                out.extend(slots(b_vecs).map(|(i, partial)| {
                    let at =
                        format!("{arg} * BK * LDB + (e / (BN / 4u)) * LDB + (e % (BN / 4u)) * 4u");
                    slot(b_vecs, i, partial, format!("put_b({at}, pb_{i});"))
                }));
            }
            "mma" => {
                for ks in 0..bk / 16 {
                    out.push("{".into());
                    out.extend((0..fm).map(|i| {
                        format!(
                            "    let fa_{i} = coopLoadT<coop_mat16x16<f16, A>>(&a_s[ab + {}u * LDA + {}u], LDA);",
                            16 * i,
                            16 * ks
                        )
                    }));
                    out.extend((0..fn_).map(|j| {
                        format!(
                            "    let fb_{j} = coopLoadT<coop_mat16x16<f16, B>>(&b_s[bb + {}u * LDB + {}u], LDB);",
                            16 * ks,
                            16 * j
                        )
                    }));
                    out.extend(blocks().map(|(i, j)| {
                        format!("    acc_{i}_{j} = coopMultiplyAdd(fa_{i}, fb_{j}, acc_{i}_{j});")
                    }));
                    out.push("}".into());
                }
            }
            "store" => {
                for (i, j) in blocks() {
                    out.push(format!("coopStoreT(acc_{i}_{j}, &c_s[warp * 256u], 16u);"));
                    out.push("workgroupBarrier();".into());
                    out.push(format!(
                        "store_block(out_base, warp, lane, row0 + wm * 16u * FM + {}u, col0 + wn * 16u * FN + {}u);",
                        16 * i,
                        16 * j
                    ));
                    out.push("workgroupBarrier();".into());
                }
            }
            _ => return None,
        }
        Some(out)
    };
    // f16 storage reads whole vec4 rows (four halves) like `vectors`.
    let flags = [
        ("halves", halves),
        ("vectors", vectors && !halves),
        ("scalar", !vectors && !halves),
    ];
    let template = resolve(Shader::MatmulCoop, &flags)?;
    expand(Shader::MatmulCoop, &template, "", &consts, generate, 7)
}

/// A template's source with its `tile:` constant lines rewritten and each `// @generate WHAT
/// ARG: ...` line replaced by `generate(WHAT, ARG)`'s statements at the line's indentation.
/// Errors if a line it rewrites is missing or a @generate is unknown, so a template edit
/// cannot silently drop code.
fn expand(
    shader: Shader,
    template: &str,
    prefix: &str,
    consts: &[(&str, String)],
    generate: impl Fn(&str, &str) -> Option<Vec<String>>,
    generates: usize,
) -> Result<String> {
    use std::fmt::Write;
    let fail = |detail: String| Error::ShaderCompilation {
        shader: shader.file(),
        detail: format!("template: {detail}"),
    };
    let mut source = String::with_capacity(template.len() * 2);
    source.push_str(prefix);
    let (mut found, mut generated) = (0, 0);
    for line in template.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("// @generate ") {
            let spec = rest.split(':').next().unwrap_or("");
            let (what, arg) = spec.split_once(' ').unwrap_or((spec, ""));
            let statements =
                generate(what, arg).ok_or_else(|| fail(format!("unknown @generate {what:?}")))?;
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
    if found != consts.len() || generated != generates {
        return Err(fail(format!(
            "{found} of {} tile lines and {generated} of {generates} @generate lines found",
            consts.len()
        )));
    }
    Ok(source)
}

/// matmul_coop.wgsl with, of each `// @if FLAG` ... `// @else` ... `// @end` block, only the
/// side `flags` selects.
/// (Native only, like the template: the browser package carries neither.)
#[cfg(native)]
fn resolve(shader: Shader, flags: &[(&str, bool)]) -> Result<String> {
    let fail = |detail: String| Error::ShaderCompilation {
        shader: shader.file(),
        detail: format!("template: {detail}"),
    };
    let mut out = String::with_capacity(shader.source().len() * 2);
    // Inside an @if block: whether its current side is kept.
    let mut keep: Option<bool> = None;
    for line in shader.source().lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("// @if ") {
            let flag = rest.split(':').next().unwrap_or("").trim();
            let on = flags.iter().find(|(f, _)| *f == flag).map(|&(_, on)| on);
            keep = Some(on.ok_or_else(|| fail(format!("unknown @if flag {flag:?}")))?);
        } else if trimmed.starts_with("// @else") {
            keep = keep.map(|k| !k);
        } else if trimmed.starts_with("// @end") {
            keep = None;
        } else if keep == Some(false) {
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}
