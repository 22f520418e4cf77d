//! Running a batch: once ([`Batch::run`]), or captured as a [`Graph`] and replayed with new
//! input data. The backend decides how (see `backend/replay.rs`); a device that cannot replay
//! runs the graph's ops again.

use super::plan::Plan;
use super::{missing, Batch, BatchResult, Op, Value};
use crate::backend::replay::Replayer;
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
}

impl Graph {
    /// Runs the graph again. `inputs` replaces the data of some of the batch's uploads (each
    /// the same length as before); the others keep their data.
    pub async fn run(&mut self, inputs: &[(Value, &[f32])]) -> Result<BatchResult> {
        for (v, data) in inputs {
            let node = self.batch.node(*v, "graph input")?;
            if !matches!(node.op, Op::Input) {
                return Err(Error::InvalidArgument {
                    op: "graph input",
                    reason: "only values made by `upload` take new data".into(),
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
        }
        // A replay bypasses the ops; under verification the graph runs its ops instead.
        let captured = match self.batch.device.verifier().is_on() {
            true => None,
            false => self.captured.as_ref(),
        };
        let Some(c) = captured else {
            for (v, data) in inputs {
                let shape = self.batch.nodes[v.index].shape.clone();
                self.batch.nodes[v.index].tensor = Some(self.batch.device.tensor(data, &shape)?);
            }
            return self.batch.run().await;
        };
        let mut ins = Vec::with_capacity(inputs.len());
        for (v, data) in inputs {
            ins.push((self.input_tensor(*v)?.storage(), *data));
        }
        let outs: Vec<_> = c.outputs.iter().map(|t| (t.storage(), t.len())).collect();
        let data = self
            .batch
            .device
            .backend()
            .replay(&c.replay, &ins, &outs)
            .await?;
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
