//! Rotary position embeddings (RoPE) and their tables.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Which elements RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeLayout {
    /// Pairs `(x[2j], x[2j + 1])` (GPT-J, llama.cpp's default).
    Interleaved,
    /// Pairs `(x[j], x[j + dim/2])` (GPT-NeoX, Hugging Face llama).
    HalfSplit,
}

impl Tensor {
    /// Rotates pairs of the last axis by position: `self` is `[.., seq, dim]` (position = the
    /// second-to-last axis), `cos` and `sin` are `[seq, dim / 2]`, as [`Device::rope_tables`]
    /// makes them. For `[batch, seq, heads, dim]` data, `transpose(1, 2)` first.
    pub fn rope(&self, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
        let shape = self.shape();
        if shape.len() < 2 || !shape[shape.len() - 1].is_multiple_of(2) {
            return Err(Error::InvalidArgument {
                op: "rope",
                reason: format!("expected [.., seq, dim] with an even dim, got {shape:?}"),
            });
        }
        let (seq, dim) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        for t in [cos, sin] {
            self.same_device(t, "rope")?;
            if t.shape() != [seq, dim / 2] {
                return Err(Error::shape(
                    "rope",
                    t.shape(),
                    &[seq, dim / 2],
                    "(cos and sin tables are [seq, dim / 2])",
                ));
            }
        }
        if let Some(out) =
            Tensor::promoted("rope", &[self, cos, sin], |t| t[0].rope(t[1], t[2], layout))?
        {
            // The result has x's dtype whatever the tables' (f32 tables rotate f16 data).
            return out.cast(self.dtype());
        }
        self.device().check_output("rope", shape)?;
        let spec = RopeSpec {
            n: self.len(),
            seq,
            dim,
            layout,
        };
        let storage =
            self.device()
                .op(&spec)
                .rope(self.storage(), cos.storage(), sin.storage(), spec)?;
        let out = self.with_storage(storage, shape.to_vec());
        out.verified("rope", [self, cos, sin], Tol::Accumulate, move |t| {
            t[0].rope(t[1], t[2], layout)
        })
    }
}

impl Device {
    /// RoPE tables for positions `offset .. offset + seq`: `cos` and `sin` of
    /// `position * base^(-2j / dim)`, shape `[seq, dim / 2]`, computed in f64 on the host.
    pub fn rope_tables(
        &self,
        seq: usize,
        dim: usize,
        base: f64,
        offset: usize,
    ) -> Result<(Tensor, Tensor)> {
        if !(dim.is_multiple_of(2) && base.is_finite() && base > 0.0) {
            return Err(Error::InvalidArgument {
                op: "rope_tables",
                reason: format!("dim must be even and base positive, got dim={dim}, base={base}"),
            });
        }
        let half = dim / 2;
        let end = crate::shape::add("rope_tables", offset, seq)?;
        let n = self.check_output("rope_tables", &[seq, half])?;
        // Both tables exist at once: twice the bytes of one must fit too.
        self.check_output("rope_tables", &[2, seq, half])?;
        let (mut c, mut s) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for p in offset..end {
            for j in 0..half {
                let angle = p as f64 * base.powf(-2.0 * j as f64 / dim as f64);
                c.push(angle.cos() as f32);
                s.push(angle.sin() as f32);
            }
        }
        Ok((
            self.tensor(&c, &[seq, half])?,
            self.tensor(&s, &[seq, half])?,
        ))
    }
}

/// RoPE over `n` elements in rows of `dim`; row `r` takes the table row `r % seq`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RopeSpec {
    pub n: usize,
    pub seq: usize,
    pub dim: usize,
    pub layout: RopeLayout,
}

impl OpSpec for RopeSpec {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 3)
    }
}
