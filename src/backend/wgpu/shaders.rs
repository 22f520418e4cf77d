//! The WGSL shader files of `shaders/` by typed name, with their sources as build.rs assembled
//! them (includes inlined, comments stripped).

/// The shader files in `shaders/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    Cast,
    Compare,
    ElementwiseUnary,
    ElementwiseBinary,
    ElementwiseBroadcast,
    Reduce,
    Softmax,
    Matmul,
    MatmulCoop,
    Norm,
    Layout,
    Embedding,
    Rope,
    Attention,
    AttentionSplit,
    TopK,
    Quant,
    QuantCached,
    Conv,
    Pool,
    MatmulGemv,
    MatmulGemvSubgroup,
    ElementwiseWhere,
    ElementwiseStrided,
}

impl Shader {
    pub(crate) const ALL: [Shader; 24] = [
        Shader::Cast,
        Shader::Compare,
        Shader::ElementwiseUnary,
        Shader::ElementwiseBinary,
        Shader::ElementwiseBroadcast,
        Shader::Reduce,
        Shader::Softmax,
        Shader::Matmul,
        Shader::MatmulCoop,
        Shader::Norm,
        Shader::Layout,
        Shader::Embedding,
        Shader::Rope,
        Shader::Attention,
        Shader::AttentionSplit,
        Shader::TopK,
        Shader::Quant,
        Shader::QuantCached,
        Shader::Conv,
        Shader::Pool,
        Shader::MatmulGemv,
        Shader::MatmulGemvSubgroup,
        Shader::ElementwiseWhere,
        Shader::ElementwiseStrided,
    ];

    pub(crate) fn file(self) -> &'static str {
        match self {
            Shader::Cast => "cast.wgsl",
            Shader::Compare => "compare.wgsl",
            Shader::ElementwiseUnary => "elementwise_unary.wgsl",
            Shader::ElementwiseBinary => "elementwise_binary.wgsl",
            Shader::ElementwiseBroadcast => "elementwise_broadcast.wgsl",
            Shader::Reduce => "reduce.wgsl",
            Shader::Softmax => "softmax.wgsl",
            Shader::Matmul => "matmul.wgsl",
            Shader::MatmulCoop => "matmul_coop.wgsl",
            Shader::Norm => "norm.wgsl",
            Shader::Layout => "layout.wgsl",
            Shader::Embedding => "embedding.wgsl",
            Shader::Rope => "rope.wgsl",
            Shader::Attention => "attention.wgsl",
            Shader::AttentionSplit => "attention_split.wgsl",
            Shader::TopK => "topk.wgsl",
            Shader::Quant => "quant.wgsl",
            Shader::QuantCached => "quant_cached.wgsl",
            Shader::Conv => "conv.wgsl",
            Shader::Pool => "pool.wgsl",
            Shader::MatmulGemv => "matmul_gemv.wgsl",
            Shader::MatmulGemvSubgroup => "matmul_gemv_subgroup.wgsl",
            Shader::ElementwiseWhere => "elementwise_where.wgsl",
            Shader::ElementwiseStrided => "elementwise_strided.wgsl",
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            Shader::Cast => include_str!(concat!(env!("OUT_DIR"), "/shaders/cast.wgsl")),
            Shader::Compare => include_str!(concat!(env!("OUT_DIR"), "/shaders/compare.wgsl")),
            Shader::ElementwiseUnary => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/elementwise_unary.wgsl"))
            }
            Shader::ElementwiseBinary => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/elementwise_binary.wgsl"))
            }
            Shader::ElementwiseBroadcast => {
                include_str!(concat!(
                    env!("OUT_DIR"),
                    "/shaders/elementwise_broadcast.wgsl"
                ))
            }
            Shader::Reduce => include_str!(concat!(env!("OUT_DIR"), "/shaders/reduce.wgsl")),
            Shader::Softmax => include_str!(concat!(env!("OUT_DIR"), "/shaders/softmax.wgsl")),
            Shader::Matmul => include_str!(concat!(env!("OUT_DIR"), "/shaders/matmul.wgsl")),
            // Cooperative matrices are native-only: the browser package leaves the text out.
            #[cfg(native)]
            Shader::MatmulCoop => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/matmul_coop.wgsl"))
            }
            #[cfg(web)]
            Shader::MatmulCoop => "",
            Shader::Norm => include_str!(concat!(env!("OUT_DIR"), "/shaders/norm.wgsl")),
            Shader::Layout => include_str!(concat!(env!("OUT_DIR"), "/shaders/layout.wgsl")),
            Shader::Embedding => include_str!(concat!(env!("OUT_DIR"), "/shaders/embedding.wgsl")),
            Shader::Rope => include_str!(concat!(env!("OUT_DIR"), "/shaders/rope.wgsl")),
            Shader::Attention => include_str!(concat!(env!("OUT_DIR"), "/shaders/attention.wgsl")),
            Shader::AttentionSplit => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/attention_split.wgsl"))
            }
            Shader::TopK => include_str!(concat!(env!("OUT_DIR"), "/shaders/topk.wgsl")),
            Shader::Quant => include_str!(concat!(env!("OUT_DIR"), "/shaders/quant.wgsl")),
            // The cache-storing GEMV is native-only (`caches_in_gemv`): the browser package
            // leaves the text out.
            #[cfg(native)]
            Shader::QuantCached => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/quant_cached.wgsl"))
            }
            #[cfg(web)]
            Shader::QuantCached => "",
            Shader::Conv => include_str!(concat!(env!("OUT_DIR"), "/shaders/conv.wgsl")),
            Shader::Pool => include_str!(concat!(env!("OUT_DIR"), "/shaders/pool.wgsl")),
            Shader::MatmulGemv => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/matmul_gemv.wgsl"))
            }
            Shader::MatmulGemvSubgroup => {
                include_str!(concat!(
                    env!("OUT_DIR"),
                    "/shaders/matmul_gemv_subgroup.wgsl"
                ))
            }
            Shader::ElementwiseWhere => {
                include_str!(concat!(env!("OUT_DIR"), "/shaders/elementwise_where.wgsl"))
            }
            Shader::ElementwiseStrided => {
                include_str!(concat!(
                    env!("OUT_DIR"),
                    "/shaders/elementwise_strided.wgsl"
                ))
            }
        }
    }
}
