//! Token embeddings and rotary position embeddings (RoPE).

use crate::device::Device;
use crate::error::{Error, Result};
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
    /// Rows of this `[vocab, dim]` table picked by `ids`: shape `[ids.len(), dim]`. Every id must
    /// be below `vocab` (checked before anything runs).
    pub fn embedding(&self, ids: &[u32]) -> Result<Tensor> {
        let &[vocab, dim] = self.shape() else {
            return Err(Error::InvalidArgument {
                op: "embedding",
                reason: format!("the table must be [vocab, dim], got {:?}", self.shape()),
            });
        };
        if let Some((pos, &bad)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
            return Err(Error::InvalidArgument {
                op: "embedding",
                reason: format!(
                    "id {bad} at position {pos} is not below the vocabulary size {vocab}"
                ),
            });
        }
        let n = self.device().check_output("embedding", &[ids.len(), dim])?;
        let storage = self
            .device()
            .op("embedding", crate::profile::Work::elements(n, 2))
            .embedding(self.storage(), ids, dim)?;
        let out = self.with_storage(storage, vec![ids.len(), dim]);
        let ids = ids.to_vec();
        out.verified("embedding", [self], Tol::Exact, move |t| {
            t[0].embedding(&ids)
        })
    }

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
        self.device().check_output("rope", shape)?;
        let work = crate::profile::Work::elements(self.len(), 3);
        let storage = self.device().op("rope", work).rope(
            self.storage(),
            cos.storage(),
            sin.storage(),
            [self.len(), seq, dim],
            layout,
        )?;
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
