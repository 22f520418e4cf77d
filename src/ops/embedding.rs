//! Token embeddings: rows of a table picked by id.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// The word an id outside the table fills its row with: NaN read as f32, and as each of the
/// two f16 or bf16 halves.
pub(crate) const MISSING_ROW: u32 = 0x7fff_7fff;

impl Tensor {
    /// Rows of this `[vocab, dim]` table picked by `ids`: shape `[ids.len(), dim]`, in the
    /// table's dtype. Every id must be below `vocab` (checked before anything runs).
    pub fn embedding(&self, ids: &[u32]) -> Result<Tensor> {
        let (vocab, _) = self.table_dims()?;
        if let Some((pos, &bad)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
            return Err(Error::InvalidArgument {
                op: "embedding",
                reason: format!(
                    "id {bad} at position {pos} is not below the vocabulary size {vocab}"
                ),
            });
        }
        let ids = self.device().tensor_of(ids, &[ids.len()])?;
        self.embedding_ids(&ids)
    }

    /// Rows of this `[vocab, dim]` table picked by a device tensor of u32 (or i32) ids of any
    /// shape: the result is `ids.shape() + [dim]`, in the table's dtype. The ids stay on the
    /// device, so a recorded batch or a [`Graph`](crate::Graph) takes new ones each run. An id
    /// at or above `vocab` (a negative i32 included) cannot be checked without a read back:
    /// its row comes out NaN.
    pub fn embedding_ids(&self, ids: &Tensor) -> Result<Tensor> {
        self.same_device(ids, "embedding")?;
        if !self.is_contiguous() || !ids.is_contiguous() {
            return self.contiguous()?.embedding_ids(&ids.contiguous()?);
        }
        ids.expect_integer("embedding", "ids")?;
        let (vocab, dim) = self.table_dims()?;
        let mut shape = ids.shape().to_vec();
        shape.push(dim);
        self.device()
            .check_output_of("embedding", &shape, self.dtype())?;
        let dtype = self.dtype();
        // Rows are gathered as 32-bit words: a half table with an even dim moves two elements
        // a word; an odd one goes through f32.
        let words = match dtype.size() {
            4 => dim,
            _ if dim % 2 == 0 => dim / 2,
            _ => {
                let out = self.cast(DType::F32)?.embedding_ids(ids)?;
                return out.cast(dtype);
            }
        };
        let spec = EmbeddingSpec {
            count: ids.len(),
            dim: words,
            vocab,
        };
        let storage = self
            .device()
            .op(&spec)
            .embedding(self.storage(), ids.storage(), spec)?;
        let out = Tensor::new_typed(self.device().clone(), storage, shape, dtype);
        out.verified("embedding", [self, ids], Tol::Exact, move |t| {
            t[0].embedding_ids(t[1])
        })
    }

    /// `(vocab, dim)` of an embedding table.
    fn table_dims(&self) -> Result<(usize, usize)> {
        match *self.shape() {
            [vocab, dim] => Ok((vocab, dim)),
            _ => Err(Error::InvalidArgument {
                op: "embedding",
                reason: format!("the table must be [vocab, dim], got {:?}", self.shape()),
            }),
        }
    }
}

/// `count` rows of `dim` 32-bit words picked from a table of `vocab` rows by id (the ids
/// travel beside the spec as a u32 storage; one at or above `vocab` fills its row with
/// [`MISSING_ROW`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EmbeddingSpec {
    pub count: usize,
    pub dim: usize,
    pub vocab: usize,
}

impl OpSpec for EmbeddingSpec {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn work(&self) -> Work {
        Work::elements(self.count * self.dim, 2)
    }
}
