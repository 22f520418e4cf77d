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

/// `rows` rows of `width` 32-bit words written into a tensor of `capacity` rows, from the row
/// that a u32 device value names: the in-place store of a KV cache that a recorded decode step
/// replays (see [`Tensor::write_rows`]). Rows that would land past `capacity` are dropped.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "models"), allow(dead_code))]
pub(crate) struct WriteRowsSpec {
    pub rows: usize,
    pub width: usize,
    pub capacity: usize,
    /// Where the rows start in their storage, in words (a view's offset).
    pub offset: usize,
    /// Words from one source row to the next: `width` for dense rows, more for rows that are
    /// a view's (a KV cache's part of a fused projection's output, read in place).
    pub stride: usize,
}

impl OpSpec for WriteRowsSpec {
    fn name(&self) -> &'static str {
        "write_rows"
    }

    fn work(&self) -> Work {
        Work::elements(self.rows * self.width, 2)
    }
}

impl Tensor {
    /// Writes `rows` into this tensor **in place** along `axis`, starting at the index held by
    /// `at` (a one-element u32 device tensor, so a [`Graph`](crate::Graph) replays the write
    /// at a new place each run), and returns a tensor sharing this one's storage, so that ops
    /// recorded after it read what it wrote. Axes before `axis` must be 1 and the others equal
    /// `rows`'. Rows that would land past the end are dropped: `at` is not read back.
    ///
    /// Tensors are otherwise values; this is for buffers the caller owns alone, such as a
    /// preallocated KV cache, on backends that replay graphs (wgpu and CUDA). The CPU backend,
    /// whose graphs run their ops again, refuses it.
    /// Writes the one-row product `y`'s columns `from..` into this `[1, capacity, .., width]`
    /// tensor in place as its row `at` (see [`Tensor::write_rows`]), in this tensor's dtype:
    /// the new key and value rows of a fused projection. The columns are read in place as
    /// rows of `width`.
    #[cfg(feature = "models")]
    pub(crate) fn write_columns(&self, at: &Tensor, y: &Tensor, from: usize) -> Result<Tensor> {
        let width = self.shape().last().copied().unwrap_or(1).max(1);
        let n = y.len();
        if !(n.is_multiple_of(width) && from.is_multiple_of(width) && from <= n) {
            return Err(Error::shape(
                "write_rows",
                y.shape(),
                self.shape(),
                "(the product's columns from `from` on are whole rows of the cache's width)",
            ));
        }
        let rows = y
            .reshape(&[1, 1, n / width, width])?
            .slice(2, from / width..n / width)?
            .cast(self.dtype())?;
        self.write_rows(1, at, &rows)
    }

    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn write_rows(&self, axis: usize, at: &Tensor, rows: &Tensor) -> Result<Tensor> {
        let op = "write_rows";
        self.same_device(rows, op)?;
        self.same_device(at, op)?;
        at.expect_integer(op, "at")?;
        let (s, r) = (self.shape(), rows.shape());
        if s.len() != r.len()
            || axis >= s.len()
            || s[..axis].iter().any(|&d| d != 1)
            || r[..axis].iter().any(|&d| d != 1)
            || s[axis + 1..] != r[axis + 1..]
            || self.dtype() != rows.dtype()
            || at.len() != 1
        {
            return Err(Error::shape(
                op,
                s,
                r,
                "(rows of the same width and dtype, leading axes of 1, one u32 index)",
            ));
        }
        if !self.is_contiguous() {
            return Err(Error::InvalidArgument {
                op,
                reason: "the destination must be a whole tensor, not a view".into(),
            });
        }
        if !at.is_contiguous() {
            return self.write_rows(axis, &at.contiguous()?, rows);
        }
        // Rows read in place: each dense, one stride apart (a view of rows with the leading axes
        // of 1, such as a KV cache's heads of a fused projection); other views are copied out.
        let elems: usize = s[axis + 1..].iter().product();
        let Some((offset, stride)) = rows.row_layout(axis) else {
            return self.write_rows(axis, at, &rows.contiguous()?);
        };
        if self.dtype().size() != 4 && !(offset.is_multiple_of(2) && stride.is_multiple_of(2)) {
            return self.write_rows(axis, at, &rows.contiguous()?);
        }
        let (width, offset, stride) = match self.dtype().size() {
            4 => (elems, offset, stride),
            _ if elems.is_multiple_of(2) => (elems / 2, offset / 2, stride / 2),
            _ => {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("half rows of {elems} elements (an odd count) are not words"),
                })
            }
        };
        let spec = WriteRowsSpec {
            rows: r[axis],
            width,
            capacity: s[axis],
            offset,
            stride,
        };
        self.device()
            .op(&spec)
            .write_rows(self.storage(), rows.storage(), at.storage(), spec)?;
        Ok(self.clone())
    }
}
