//! [`EmbedSession`]: the embedder's forward pass recorded and compiled once per (batch,
//! length) bucket, then replayed with new texts.

use super::*;

/// Sentence embeddings through compiled graphs: each (batch, length) bucket (batches rounded
/// up to a power of two, lengths to a multiple of 16) is recorded and compiled once, then
/// replayed with the new texts' ids, lengths and pooling weights (on CUDA a CUDA graph: one
/// launch instead of a hundred). The results equal [`Embedder::embed`]'s; the padding a bucket
/// adds is masked. The last [`EmbedSession::CAPACITY`] buckets used are kept (each holds its
/// activations' memory). Where the device cannot replay (the CPU backend), a session embeds as
/// [`Embedder::embed`] does. Not `Send`: one session per thread.
pub struct EmbedSession<'a> {
    pub(super) embedder: &'a Embedder,
    pub(super) buckets: Buckets,
}

/// The compiled buckets of a session, apart from the embedder they belong to (the JS
/// `Embedder` keeps them beside its shared model).
#[derive(Default)]
pub(crate) struct Buckets {
    graphs: Vec<Prepared>,
}

/// One bucket's compiled graph and its inputs.
struct Prepared {
    batch: usize,
    len: usize,
    graph: crate::Graph,
    ids: crate::Value,
    lengths: crate::Value,
    pool: crate::Value,
    out: crate::Value,
}

impl EmbedSession<'_> {
    /// Buckets kept compiled.
    pub const CAPACITY: usize = 8;

    /// One L2-normalised embedding per text, in order, as [`Embedder::embed`] gives them.
    pub async fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.buckets.embed(self.embedder, texts).await
    }

    /// Blocking [`EmbedSession::embed`].
    #[cfg(native)]
    pub fn embed_blocking(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        crate::future::block_on(self.embed(texts))
    }
}

impl Buckets {
    /// [`EmbedSession::embed`] with `e`'s model, which compiled every kept bucket.
    pub(crate) async fn embed(&mut self, e: &Embedder, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        if !e.device.backend().replays() {
            // A graph here would run its ops again, padded to the bucket: the eager pass is the
            // same work without the padding.
            return e.embed(texts).await;
        }
        let ids = e.encode_all(texts);
        let mut out = vec![Vec::new(); ids.len()];
        for part in e.parts(&ids) {
            let batch: Vec<&[u32]> = part.iter().map(|&i| ids[i].as_slice()).collect();
            let b = batch.len().next_power_of_two().min(Embedder::MAX_BATCH);
            let max = e.weights.config.max_positions;
            let len = longest(&batch)
                .div_ceil(16)
                .saturating_mul(16)
                .clamp(16, max.max(1));
            let x = Inputs::new(&batch, b, len.max(longest(&batch)), e.tokenizer.pad_id());
            let prepared = self.prepared(e, x.batch, x.len)?;
            prepared.graph.set_input(prepared.ids, &x.ids)?;
            prepared.graph.set_input(prepared.lengths, &x.lengths)?;
            let result = prepared.graph.run(&[(prepared.pool, &x.pool)]).await?;
            let values = result.get(prepared.out)?;
            for (&i, v) in part.iter().zip(values.chunks(e.dim())) {
                out[i] = v.to_vec();
            }
        }
        Ok(out)
    }

    /// The bucket's graph, compiled now if it is not kept (dropping the least recently used).
    fn prepared(&mut self, e: &Embedder, batch: usize, len: usize) -> Result<&mut Prepared> {
        if let Some(at) = self
            .graphs
            .iter()
            .position(|p| p.batch == batch && p.len == len)
        {
            let p = self.graphs.remove(at);
            self.graphs.push(p);
        } else {
            if self.graphs.len() >= EmbedSession::CAPACITY {
                self.graphs.remove(0);
            }
            let x = Inputs::new(&[], batch, len, e.tokenizer.pad_id());
            let mut rec = e.device.batch();
            let ids = rec.upload_of(&x.ids, &[batch, len])?;
            let lengths = rec.upload_of(&x.lengths, &[batch])?;
            let pool = rec.upload(&x.pool, &[batch, 1, len])?;
            let mut inputs = vec![ids, lengths, pool];
            for w in e.weights.tensors() {
                inputs.push(rec.tensor(w)?);
            }
            let config = e.weights.config.clone();
            let out = rec.apply("all-minilm-l6-v2", &inputs, move |t| {
                forward(&config, &t[3..], t[0], t[1], t[2])
            })?;
            rec.output(out)?;
            self.graphs.push(Prepared {
                batch,
                len,
                graph: rec.compile()?,
                ids,
                lengths,
                pool,
                out,
            });
        }
        self.graphs
            .last_mut()
            .ok_or_else(|| invalid("session", "no graph"))
    }
}
