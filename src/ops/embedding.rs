//! Token embeddings: rows of a table picked by id.

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

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
        self.device().check_output("embedding", &[ids.len(), dim])?;
        let spec = EmbeddingSpec {
            count: ids.len(),
            dim,
        };
        let storage = self
            .device()
            .op(&spec)
            .embedding(self.storage(), ids, spec)?;
        let out = self.with_storage(storage, vec![ids.len(), dim]);
        let ids = ids.to_vec();
        out.verified("embedding", [self], Tol::Exact, move |t| {
            t[0].embedding(&ids)
        })
    }
}

/// `count` rows of `dim` elements picked from a table by id (the ids travel beside the spec,
/// already checked against the table).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EmbeddingSpec {
    pub count: usize,
    pub dim: usize,
}

impl OpSpec for EmbeddingSpec {
    fn name(&self) -> &'static str {
        "embedding"
    }

    fn work(&self) -> Work {
        Work::elements(self.count * self.dim, 2)
    }
}
