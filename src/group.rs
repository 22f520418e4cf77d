//! Several devices working together: moving tensors between devices, and the collectives of a
//! [`DeviceGroup`] (all-reduce, broadcast, all-gather, reduce-scatter), one tensor per device.
//!
//! Between CUDA devices a tensor moves by one peer copy; between any others through the host
//! (a read, then an upload), so every pair works: CUDA, Vulkan, WebGPU and the CPU backend,
//! natively and in the browser. A group of different CUDA devices runs its collectives on NCCL
//! where libnccl loads; any other group stages them through rank 0, reducing there with
//! gpukit's own ops, so sum, mean, max and min give exactly what the single-device ops give
//! (NaN included) on every backend.

use std::sync::{Arc, OnceLock};

use crate::backend::collective::{Collectives, Kind};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::ReduceOp;
use crate::tensor::Tensor;

impl Tensor {
    /// A copy of this tensor on `device`, or the tensor itself when it is already there.
    /// Between CUDA devices it is one peer copy (NVLink or PCIe P2P where the GPUs reach each
    /// other), ordered on both devices' streams; between other devices the data goes through
    /// the host: read back here, uploaded there.
    pub async fn to(&self, device: &Device) -> Result<Tensor> {
        if self.device().same(device) {
            return Ok(self.clone());
        }
        if !self.is_contiguous() {
            return Box::pin(self.contiguous()?.to(device)).await;
        }
        self.device().check_lost()?;
        device.check_lost()?;
        let peer =
            self.device()
                .backend()
                .copy_to_device(self.storage(), self.words(), device.backend());
        if let Some(copied) = peer {
            let storage = device.note_loss(copied)?;
            let shape = self.shape().to_vec();
            return Ok(Tensor::new_typed(
                device.clone(),
                storage,
                shape,
                self.dtype(),
            ));
        }
        self.to_device(device).await
    }
}

/// Devices that run collectives together: rank `i` is `devices()[i]`, and every collective takes
/// one tensor per rank, each on its rank's device, and returns one per rank.
#[derive(Clone)]
pub struct DeviceGroup {
    devices: Vec<Device>,
    /// NCCL where every rank is a different CUDA device (made at the first collective).
    fast: Arc<OnceLock<Option<Collectives>>>,
}

impl std::fmt::Debug for DeviceGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.info().adapter, d.info().backend))
            .collect();
        f.debug_struct("DeviceGroup")
            .field("devices", &names)
            .finish()
    }
}

impl DeviceGroup {
    /// A group of `devices` (at least one), ranked in this order.
    pub fn new(devices: Vec<Device>) -> Result<DeviceGroup> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                op: "DeviceGroup::new",
                reason: "a group needs at least one device".into(),
            });
        }
        Ok(DeviceGroup {
            devices,
            fast: Arc::default(),
        })
    }

    /// Every CUDA device of this machine, by ordinal.
    pub async fn cuda_all() -> Result<DeviceGroup> {
        let count = crate::backend::open::cuda_count()?;
        let mut devices = Vec::with_capacity(count);
        for i in 0..count {
            devices.push(Device::with_backend_at(crate::Backend::Cuda, i).await?);
        }
        DeviceGroup::new(devices)
    }

    /// The devices, by rank.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    /// Checks that `tensors` has one tensor per rank, on that rank's device, all of one shape
    /// and f32; returns them row-major (a view is copied out, as collectives read storage).
    fn check(&self, op: &'static str, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if tensors.len() != self.devices.len() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{} tensors for a group of {} devices (one per rank)",
                    tensors.len(),
                    self.devices.len()
                ),
            });
        }
        for (rank, (t, d)) in tensors.iter().zip(&self.devices).enumerate() {
            if !t.device().same(d) {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("the tensor of rank {rank} is not on that rank's device"),
                });
            }
            if t.dtype() != crate::DType::F32 {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!(
                        "collectives take f32 tensors; rank {rank}'s is {}",
                        t.dtype()
                    ),
                });
            }
            if t.shape() != tensors[0].shape() {
                return Err(Error::shape(
                    op,
                    t.shape(),
                    tensors[0].shape(),
                    "(a rank's tensor against rank 0's: every rank's tensor has one shape)",
                ));
            }
        }
        tensors.iter().map(Tensor::contiguous).collect()
    }

    /// Whether collectives run on NCCL (every rank a different CUDA device of this process,
    /// and libnccl found) rather than through the host.
    pub fn uses_nccl(&self) -> bool {
        self.fast().is_some()
    }

    fn fast(&self) -> Option<&Collectives> {
        self.fast
            .get_or_init(|| {
                if self.devices.len() < 2 {
                    return None;
                }
                let backends: Vec<_> = self.devices.iter().map(Device::backend).collect();
                Collectives::for_backends(&backends)
            })
            .as_ref()
    }

    /// `kind` on NCCL when the group runs there, with `shape` for every rank's output.
    fn on_nccl(
        &self,
        tensors: &[Tensor],
        kind: Kind,
        shape: &[usize],
    ) -> Result<Option<Vec<Tensor>>> {
        let Some(fast) = self.fast() else {
            return Ok(None);
        };
        for d in &self.devices {
            d.check_lost()?;
        }
        let backends: Vec<_> = self.devices.iter().map(Device::backend).collect();
        let inputs: Vec<_> = tensors.iter().map(Tensor::storage).collect();
        let outs = fast.run(&backends, &inputs, tensors[0].len(), kind)?;
        Ok(Some(
            outs.into_iter()
                .zip(&self.devices)
                .map(|(s, d)| Tensor::new(d.clone(), s, shape.to_vec()))
                .collect(),
        ))
    }

    /// `tensors` reduced elementwise by `op` (sum, mean, max or min), on every rank. Staged
    /// through rank 0, NaN wins max and min as in the single-device ops; on NCCL the sums run
    /// in NCCL's order and max and min follow NCCL.
    pub async fn all_reduce(&self, tensors: &[Tensor], op: ReduceOp) -> Result<Vec<Tensor>> {
        let tensors = &self.check("all_reduce", tensors)?;
        let shape = tensors[0].shape().to_vec();
        if let Some(out) = self.on_nccl(tensors, Kind::AllReduce(op), &shape)? {
            return Ok(out);
        }
        let reduced = self.reduce_on_first(tensors, op).await?;
        self.spread(&reduced).await
    }

    /// The tensor of rank `root` on every rank.
    pub async fn broadcast(&self, tensors: &[Tensor], root: usize) -> Result<Vec<Tensor>> {
        let tensors = &self.check("broadcast", tensors)?;
        let Some(source) = tensors.get(root) else {
            return Err(Error::InvalidArgument {
                op: "broadcast",
                reason: format!("root {root} is not a rank of a group of {}", self.size()),
            });
        };
        let shape = source.shape().to_vec();
        if let Some(out) = self.on_nccl(tensors, Kind::Broadcast(root), &shape)? {
            return Ok(out);
        }
        self.spread(source).await
    }

    /// Every rank's tensor joined along axis 0 (rank order), on every rank.
    pub async fn all_gather(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        let tensors = &self.check("all_gather", tensors)?;
        if let Some((&rows, rest)) = tensors[0].shape().split_first() {
            let mut shape = vec![rows * self.size()];
            shape.extend(rest);
            if let Some(out) = self.on_nccl(tensors, Kind::AllGather, &shape)? {
                return Ok(out);
            }
        }
        let joined = self.gather_on_first(tensors, "all_gather").await?;
        self.spread(&joined).await
    }

    /// `tensors` reduced by `op`, then split along axis 0 into one equal part per rank: rank
    /// `i` gets part `i`. Axis 0's length must be a multiple of the group's size.
    pub async fn reduce_scatter(&self, tensors: &[Tensor], op: ReduceOp) -> Result<Vec<Tensor>> {
        let tensors = &self.check("reduce_scatter", tensors)?;
        let rows = tensors[0].shape().first().copied().unwrap_or(0);
        if tensors[0].shape().is_empty() || !rows.is_multiple_of(self.size()) {
            return Err(Error::InvalidArgument {
                op: "reduce_scatter",
                reason: format!(
                    "axis 0 of {:?} does not split into {} equal parts",
                    tensors[0].shape(),
                    self.size()
                ),
            });
        }
        let mut part_shape = tensors[0].shape().to_vec();
        part_shape[0] = rows / self.size();
        if let Some(out) = self.on_nccl(tensors, Kind::ReduceScatter(op), &part_shape)? {
            return Ok(out);
        }
        let reduced = self.reduce_on_first(tensors, op).await?;
        let parts = reduced.chunk(self.size(), 0)?;
        let parts = if parts.len() == self.size() {
            parts
        } else {
            // Axis 0 of length 0: every rank gets the empty tensor.
            vec![reduced; self.size()]
        };
        let mut out = Vec::with_capacity(self.size());
        for (part, device) in parts.iter().zip(&self.devices) {
            out.push(part.to(device).await?);
        }
        Ok(out)
    }

    /// Data parallelism: `x` split along axis 0 into one part per rank (as [`Tensor::chunk`]
    /// splits, so with fewer rows than ranks the last ranks get none), each part moved to its
    /// rank's device and given to `f` with the rank (run eager ops there, or replay a graph
    /// compiled on that device), and the results joined along axis 0 on `x`'s device.
    pub async fn data_parallel(
        &self,
        x: &Tensor,
        f: impl Fn(usize, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        if x.shape().is_empty() {
            return Err(Error::InvalidArgument {
                op: "data_parallel",
                reason: "a tensor of shape [] has no axis 0 to split".into(),
            });
        }
        let parts = x.chunk(self.size(), 0)?;
        // Every part is sent before any rank's work is enqueued: a copy waits for everything
        // its source device has enqueued, so sending after rank 0's work would wait for it.
        let mut moved = Vec::with_capacity(parts.len());
        for (part, device) in parts.iter().zip(&self.devices) {
            moved.push(part.to(device).await?);
        }
        let outs = moved
            .iter()
            .enumerate()
            .map(|(rank, part)| f(rank, part))
            .collect::<Result<Vec<_>>>()?;
        let mut back = Vec::with_capacity(outs.len());
        for out in &outs {
            back.push(out.to(x.device()).await?);
        }
        let refs: Vec<&Tensor> = back.iter().collect();
        Tensor::concat(&refs, 0)
    }

    /// A column-parallel linear layer: rank `i` holds rows `i` of the weight
    /// (`weights[i]`: `[out_i, in]`, and `biases[i]`: `[out_i]`), and `xs[i]` is the same
    /// input `[.., in]` on every rank. Every rank gets the whole `[.., sum of out_i]` output
    /// (all-gather along the last axis).
    pub async fn linear_column_parallel(
        &self,
        xs: &[Tensor],
        weights: &[Tensor],
        biases: Option<&[Tensor]>,
    ) -> Result<Vec<Tensor>> {
        let xs = &self.check("linear_column_parallel", xs)?;
        let parts = self.linear_parts(xs, weights, biases)?;
        // Gather along axis 0 (each rank's part as a row), then move that axis last.
        let lead = parts[0].shape()[..parts[0].shape().len() - 1].to_vec();
        let rows: usize = lead.iter().product();
        let flat = parts
            .iter()
            .map(|p| {
                let width = p.shape().last().copied().unwrap_or(0);
                p.reshape(&[1, rows, width])
            })
            .collect::<Result<Vec<_>>>()?;
        let widths: Vec<usize> = flat.iter().map(|p| p.shape()[2]).collect();
        if widths.iter().any(|&w| w != widths[0]) {
            return Err(Error::InvalidArgument {
                op: "linear_column_parallel",
                reason: format!("every rank's weight must have as many rows; got {widths:?}"),
            });
        }
        let gathered = self.all_gather(&flat).await?;
        gathered
            .iter()
            .map(|g| {
                let mut shape = lead.clone();
                shape.push(widths[0] * self.size());
                g.permute(&[1, 0, 2])?.reshape(&shape)
            })
            .collect()
    }

    /// A row-parallel linear layer: rank `i` holds columns `i` of the weight (`weights[i]`:
    /// `[out, in_i]`) and the matching columns of the input (`xs[i]`: `[.., in_i]`); the
    /// partial products are summed on every rank (all-reduce), then `bias` (`[out]`, on rank
    /// 0's device) is added once.
    pub async fn linear_row_parallel(
        &self,
        xs: &[Tensor],
        weights: &[Tensor],
        bias: Option<&Tensor>,
    ) -> Result<Vec<Tensor>> {
        let partial = self.linear_parts(xs, weights, None)?;
        let mut summed = self.all_reduce(&partial, ReduceOp::Sum).await?;
        if let Some(b) = bias {
            for (out, device) in summed.iter_mut().zip(&self.devices) {
                *out = out.add(&b.to(device).await?)?;
            }
        }
        Ok(summed)
    }

    /// `xs[i] x weights[i]^T (+ biases[i])` on each rank.
    fn linear_parts(
        &self,
        xs: &[Tensor],
        weights: &[Tensor],
        biases: Option<&[Tensor]>,
    ) -> Result<Vec<Tensor>> {
        let counts = [
            xs.len(),
            weights.len(),
            biases.map_or(self.size(), <[Tensor]>::len),
        ];
        if counts.iter().any(|&c| c != self.size()) {
            return Err(Error::InvalidArgument {
                op: "parallel linear",
                reason: format!(
                    "{} inputs, {} weights and {} biases for a group of {} (one each per rank)",
                    counts[0],
                    counts[1],
                    counts[2],
                    self.size()
                ),
            });
        }
        (0..self.size())
            .map(|i| xs[i].linear(&weights[i], biases.map(|b| &b[i]), None))
            .collect()
    }

    /// Every rank's tensor stacked along a new axis 0 on rank 0's device.
    async fn gather_on_first(&self, tensors: &[Tensor], op: &'static str) -> Result<Tensor> {
        let first = &self.devices[0];
        let mut moved = Vec::with_capacity(tensors.len());
        for t in tensors {
            moved.push(t.to(first).await?);
        }
        let refs: Vec<&Tensor> = moved.iter().collect();
        Tensor::concat(&refs, 0).map_err(|e| match e {
            Error::InvalidArgument { reason, .. } => Error::InvalidArgument { op, reason },
            other => other,
        })
    }

    /// `op` over the ranks' tensors, elementwise, on rank 0's device.
    async fn reduce_on_first(&self, tensors: &[Tensor], op: ReduceOp) -> Result<Tensor> {
        let shape = tensors[0].shape().to_vec();
        let mut stacked_shape = vec![1];
        stacked_shape.extend(&shape);
        let first = &self.devices[0];
        let mut rows = Vec::with_capacity(tensors.len());
        for t in tensors {
            rows.push(t.to(first).await?.reshape(&stacked_shape)?);
        }
        let refs: Vec<&Tensor> = rows.iter().collect();
        let stacked = Tensor::concat(&refs, 0)?;
        stacked.reduce_axis(op, 0, false)?.reshape(&shape)
    }

    /// `tensor` on every rank (rank 0's copy is `tensor` itself when it is already there).
    async fn spread(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.size());
        for device in &self.devices {
            out.push(tensor.to(device).await?);
        }
        Ok(out)
    }
}
