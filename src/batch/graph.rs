//! Running a batch: once ([`Batch::run`]), or captured as a [`Graph`] and replayed with new
//! input data. The backend decides how (see `backend/replay.rs`); a device that cannot replay
//! runs the graph's ops again.

use super::plan::Plan;
use std::collections::HashMap;

use super::{missing, Batch, Op, Value};
use crate::backend::replay::Replayer;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Batch {
    /// Runs everything recorded: one submission, one read back of every output.
    pub async fn run(&self) -> Result<BatchResult> {
        let plan = Plan::new(self)?;
        let (executed, taken) = self.device.backend().run_batch(|| plan.execute(self))?;
        let values = executed?;
        let result = plan.read(self, &values, taken).await?;
        self.device.verify_pending().await?;
        Ok(result)
    }

    /// Captures the batch as a [`Graph`] (the batch runs once while it is captured). On wgpu the
    /// encoded dispatches are kept; on CUDA the batch becomes a CUDA graph.
    pub fn compile(self) -> Result<Graph> {
        let plan = Plan::new(&self)?;
        let Some(capture) = self.device.backend().capture(|| plan.execute(&self))? else {
            return Ok(Graph {
                batch: self,
                plan,
                captured: None,
                pending: Vec::new(),
            });
        };
        let values = capture.executed?;
        let taken = capture.taken.unwrap_or_else(|| plan.simulated_peak(&self));
        let outputs = self
            .outputs
            .iter()
            .map(|v| values.get(&v.index).cloned().ok_or_else(missing))
            .collect::<Result<Vec<_>>>()?;
        Ok(Graph {
            batch: self,
            plan,
            captured: Some(Captured {
                replay: capture.replay,
                outputs,
                taken,
            }),
            pending: Vec::new(),
        })
    }
}

struct Captured {
    replay: Replayer,
    outputs: Vec<Tensor>,
    taken: u64,
}

/// A compiled batch; see [`Batch::compile`].
pub struct Graph {
    batch: Batch,
    plan: Plan,
    captured: Option<Captured>,
    /// Words staged by [`Graph::set_input`] for the next run.
    pending: Vec<(Value, Vec<f32>)>,
}

impl Graph {
    /// Replaces the data of an upload of any dtype (u32 token ids, key lengths) for the next
    /// [`Graph::run`]; `data` has the upload's dtype and length.
    pub fn set_input<T: Element>(&mut self, v: Value, data: &[T]) -> Result<()> {
        let node = self.batch.node(v, "graph input")?;
        if node.dtype != T::DTYPE {
            return Err(Error::InvalidArgument {
                op: "graph input",
                reason: format!("the upload is {}, the data {}", node.dtype, T::DTYPE),
            });
        }
        if data.len() != node.len() {
            return Err(Error::shape(
                "graph input",
                &[data.len()],
                &node.shape,
                "(new data has the upload's length)",
            ));
        }
        self.set_input_words(v, crate::dtype::from_elements(data))
    }

    /// [`Graph::set_input`] from little-endian bytes of the upload's dtype (any alignment).
    pub fn set_input_bytes(&mut self, v: Value, bytes: &[u8]) -> Result<()> {
        let node = self.batch.node(v, "graph input")?;
        let want = crate::shape::mul("graph input", node.len(), node.dtype.size())?;
        if bytes.len() != want {
            return Err(Error::InvalidArgument {
                op: "graph input",
                reason: format!(
                    "{} bytes for an upload of {} {} elements ({want} bytes)",
                    bytes.len(),
                    node.len(),
                    node.dtype
                ),
            });
        }
        self.set_input_words(v, crate::dtype::pack(bytes))
    }

    fn set_input_words(&mut self, v: Value, words: Vec<f32>) -> Result<()> {
        self.check_input(v)?;
        self.pending.retain(|(p, _)| *p != v);
        self.pending.push((v, words));
        Ok(())
    }

    fn check_input(&self, v: Value) -> Result<()> {
        if !matches!(self.batch.node(v, "graph input")?.op, Op::Input) {
            return Err(Error::InvalidArgument {
                op: "graph input",
                reason: "only values made by `upload` take new data".into(),
            });
        }
        Ok(())
    }

    /// Runs the graph again. `inputs` replaces the data of some of the batch's f32 uploads
    /// (each the same length as before), and what [`Graph::set_input`] staged replaces the
    /// data of others; the rest keep their data.
    pub async fn run(&mut self, inputs: &[(Value, &[f32])]) -> Result<BatchResult> {
        let pending = self.pending.clone();
        for (v, _) in inputs {
            if self.batch.node(*v, "graph input")?.dtype != crate::DType::F32 {
                return Err(Error::InvalidArgument {
                    op: "graph input",
                    reason: "the upload is not f32: replace its data with `set_input`".into(),
                });
            }
        }
        let inputs: Vec<(Value, &[f32])> = inputs
            .iter()
            .copied()
            .chain(pending.iter().map(|(v, w)| (*v, w.as_slice())))
            .collect();
        let inputs = inputs.as_slice();
        for (v, data) in inputs {
            self.check_input(*v)?;
            let node = self.batch.node(*v, "graph input")?;
            if data.len() != crate::dtype::words("graph input", node.dtype, node.len())? {
                return Err(Error::shape(
                    "graph input",
                    &[data.len()],
                    &node.shape,
                    "(new data has the upload's length)",
                ));
            }
        }
        self.pending.clear();
        // A replay bypasses the ops; under verification the graph runs its ops instead.
        let captured = match self.batch.device.verifier().is_on() {
            true => None,
            false => self.captured.as_ref(),
        };
        let Some(c) = captured else {
            for (v, data) in inputs {
                let node = &self.batch.nodes[v.index];
                let t = self
                    .batch
                    .device
                    .tensor_words(data, &node.shape, node.dtype)?;
                self.batch.nodes[v.index].tensor = Some(t);
            }
            return self.batch.run().await;
        };
        let mut ins = Vec::with_capacity(inputs.len());
        for (v, data) in inputs {
            ins.push((self.input_tensor(*v)?.storage(), *data));
        }
        let outs: Vec<_> = c.outputs.iter().map(|t| (t.storage(), t.words())).collect();
        let words = self
            .batch
            .device
            .backend()
            .replay(&c.replay, &ins, &outs)
            .await?;
        let refs: Vec<&Tensor> = c.outputs.iter().collect();
        let data = super::plan::values_of(&refs, words);
        Ok(self
            .plan
            .result(&self.batch, data, c.taken, c.replay.kernels()))
    }

    /// The tensor holding an upload's data.
    fn input_tensor(&self, v: Value) -> Result<&Tensor> {
        self.batch.nodes[v.index]
            .tensor
            .as_ref()
            .ok_or_else(missing)
    }
}

/// One output of a run: its values as f32, and its stored words when its dtype is not f32.
#[derive(Debug, Clone)]
pub(super) struct Output {
    pub values: Vec<f32>,
    pub dtype: DType,
    pub words: Option<Vec<f32>>,
}

/// What a batch run returns: the outputs and what the run did.
#[derive(Debug, Clone)]
pub struct BatchResult {
    pub(super) outputs: HashMap<Value, Output>,
    pub(super) order: Vec<Value>,
    /// Bytes of the values the run computed (intermediates after reuse, and outputs): on
    /// wgpu what it took from the device's buffer pool, on the CPU backend the planner's count
    /// of bytes live at the peak. Uploads and tensors, which exist from record time, are not
    /// counted.
    pub peak_bytes: u64,
    /// The same count with no reuse (every computed value kept to the end).
    pub unplanned_bytes: u64,
    /// Kernels the run encoded (after fusion).
    pub kernels: usize,
    /// Recorded ops that fusion folded into other kernels.
    pub fused_ops: usize,
}

impl BatchResult {
    /// The output recorded `index`-th in its batch (see [`Batch::value`]).
    fn output_of(&self, index: usize) -> Result<&Output> {
        match self.order.iter().find(|v| v.index == index) {
            Some(&v) => self.output(v),
            None => Err(Error::InvalidArgument {
                op: "batch result",
                reason: format!("value {index} was not marked as an output"),
            }),
        }
    }

    /// The f32 values of the output recorded `index`-th.
    #[cfg_attr(native, allow(dead_code))]
    pub(crate) fn output_at(&self, index: usize) -> Result<&[f32]> {
        self.output_of(index).map(|o| o.values.as_slice())
    }

    /// The output recorded `index`-th: its dtype, stored words and element count.
    #[cfg_attr(native, allow(dead_code))]
    pub(crate) fn typed_at(&self, index: usize) -> Result<(DType, &[f32], usize)> {
        let o = self.output_of(index)?;
        Ok((
            o.dtype,
            o.words.as_deref().unwrap_or(&o.values),
            o.values.len(),
        ))
    }

    fn output(&self, v: Value) -> Result<&Output> {
        self.outputs.get(&v).ok_or(Error::InvalidArgument {
            op: "batch result",
            reason: "that value was not marked as an output".into(),
        })
    }

    /// The data of an output as f32 values, whatever its dtype (u32 indices and integers
    /// past 2^24 round as f32 does: read those with [`BatchResult::get_as`]).
    pub fn get(&self, v: Value) -> Result<&[f32]> {
        self.output(v).map(|o| o.values.as_slice())
    }

    /// The dtype of an output.
    pub fn dtype(&self, v: Value) -> Result<DType> {
        self.output(v).map(|o| o.dtype)
    }

    /// The data of an output in its own dtype, exactly as stored (`T` must be its dtype's
    /// type: `u32` for `argmax`/`topk` indices, `gpukit::f16` for an f16 value).
    pub fn get_as<T: Element>(&self, v: Value) -> Result<Vec<T>> {
        let o = self.output(v)?;
        if T::DTYPE != o.dtype {
            return Err(Error::InvalidArgument {
                op: "batch result",
                reason: format!(
                    "the output is {}, not {} (record a `cast` to read it as {})",
                    o.dtype,
                    T::DTYPE,
                    T::DTYPE
                ),
            });
        }
        let words = o.words.as_deref().unwrap_or(&o.values);
        Ok(crate::dtype::to_elements(words, o.values.len()))
    }

    /// Every output, in the order `output` marked them.
    pub fn outputs(&self) -> Vec<&[f32]> {
        self.order
            .iter()
            .filter_map(|v| self.outputs.get(v).map(|o| o.values.as_slice()))
            .collect()
    }
}
