//! A software adapter and the CPU backend behind one device: each op runs on the side the
//! measured [`DispatchPolicy`] predicts faster for its class and size, and its inputs move to
//! that side first (host data is uploaded; natively, adapter data is read back). In the browser
//! a read back cannot block, so an op with an input on the adapter stays on the adapter.

use crate::backend::wgpu::WgpuBackend;
use crate::backend::BackendOps;
use crate::backend::{cpu::CpuBackend, BackendImpl, Storage};
use crate::error::{Error, Result};
use crate::info::Backend;
use crate::policy::{DispatchPolicy, OpClass};
use crate::profile::Work;

pub(crate) struct Hybrid {
    /// The software adapter's backend (always `BackendImpl::Wgpu`).
    pub gpu: BackendImpl,
    pub cpu: BackendImpl,
    pub policy: DispatchPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Gpu,
    Cpu,
}

/// An input as the chosen side holds it: the caller's storage, or a moved copy.
enum Placed<'a> {
    Borrowed(&'a Storage),
    Moved(Storage),
}

impl Placed<'_> {
    fn get(&self) -> &Storage {
        match self {
            Placed::Borrowed(s) => s,
            Placed::Moved(s) => s,
        }
    }
}

impl Hybrid {
    pub(crate) fn new(gpu: WgpuBackend, policy: DispatchPolicy) -> Hybrid {
        Hybrid {
            gpu: BackendImpl::Wgpu(gpu),
            cpu: BackendImpl::Cpu(CpuBackend),
            policy,
        }
    }

    fn side(&self, class: OpClass, size: usize, inputs: &[&Storage]) -> Side {
        let from = match class {
            OpClass::Elementwise => self.policy.elementwise_gpu_from,
            OpClass::Matmul => self.policy.matmul_gpu_from,
        };
        let want = if from.is_some_and(|f| size >= f) {
            Side::Gpu
        } else {
            Side::Cpu
        };
        let on_gpu = inputs.iter().any(|s| matches!(s, Storage::Wgpu(_)));
        if want == Side::Cpu && on_gpu && cfg!(web) {
            Side::Gpu
        } else {
            want
        }
    }

    fn backend(&self, side: Side) -> &BackendImpl {
        match side {
            Side::Gpu => &self.gpu,
            Side::Cpu => &self.cpu,
        }
    }

    fn place<'a>(&self, side: Side, s: &'a Storage) -> Result<Placed<'a>> {
        match (side, s) {
            (Side::Gpu, Storage::Cpu(c)) => Ok(Placed::Moved(self.gpu.upload(c.data())?)),
            (Side::Cpu, Storage::Wgpu(w)) => {
                #[cfg(native)]
                {
                    let data = crate::future::block_on(self.wgpu()?.read(w, w.len()))?;
                    Ok(Placed::Moved(self.cpu.upload(&data)?))
                }
                #[cfg(web)]
                {
                    let _ = w;
                    Err(Error::Backend {
                        backend: Backend::Cpu,
                        detail: "internal error: a read back was routed in the browser".into(),
                    })
                }
            }
            _ => Ok(Placed::Borrowed(s)),
        }
    }

    /// Runs `f` on the side the policy picks for an op of `work` (see [`Work::route`]), with
    /// `inputs` placed there.
    pub(crate) fn run<R>(
        &self,
        work: Work,
        inputs: &[&Storage],
        f: impl FnOnce(&BackendImpl, &[&Storage]) -> Result<R>,
    ) -> Result<R> {
        let (class, size) = work.route();
        let (backend, placed) = self.prepare(class, size, inputs)?;
        let refs: Vec<&Storage> = placed.iter().map(Placed::get).collect();
        f(backend, &refs)
    }

    /// The side an op runs on and its inputs placed there. Not generic and not inlined: every
    /// op's `run` shares it (each inlined copy cost the browser package about 700 bytes).
    #[inline(never)]
    fn prepare<'a>(
        &'a self,
        class: OpClass,
        size: usize,
        inputs: &[&'a Storage],
    ) -> Result<(&'a BackendImpl, Vec<Placed<'a>>)> {
        let side = self.side(class, size, inputs);
        let placed = inputs
            .iter()
            .map(|s| self.place(side, s))
            .collect::<Result<Vec<_>>>()?;
        Ok((self.backend(side), placed))
    }

    fn wgpu(&self) -> Result<&WgpuBackend> {
        self.gpu.wgpu().ok_or(Error::Backend {
            backend: Backend::Cpu,
            detail: "internal error: a hybrid device without an adapter".into(),
        })
    }

    /// Reads a storage from whichever side holds it.
    pub(crate) async fn read(&self, x: &Storage, n: usize) -> Result<Vec<f32>> {
        match x {
            Storage::Wgpu(w) => self.wgpu()?.read(w, n).await,
            Storage::Cpu(c) => CpuBackend.read(c, n).await,
            Storage::Meta => Ok(Vec::new()),
            #[cfg(cuda)]
            Storage::Cuda(_) => Err(Error::DeviceMismatch {
                op: "hybrid read back",
            }),
        }
    }

    pub(crate) async fn synchronize(&self) -> Result<()> {
        self.wgpu()?.synchronize().await
    }
}

#[cfg(all(test, native))]
mod tests {
    use super::*;
    use crate::ops::MatmulOptions;
    use crate::Device;

    fn side(t: &crate::Tensor) -> &'static str {
        match t.storage() {
            Storage::Wgpu(_) => "adapter",
            Storage::Cpu(_) => "cpu",
            Storage::Meta => "meta",
            #[cfg(cuda)]
            Storage::Cuda(_) => "cuda",
        }
    }

    /// Needs the adapter `make test` installs (lavapipe): fails, never skips, without one.
    #[test]
    fn ops_run_where_the_policy_says_and_inputs_follow() {
        let gpu = pollster::block_on(Device::with_backend(crate::Backend::Vulkan))
            .expect("make test installs lavapipe, so a Vulkan adapter exists");
        let policy = DispatchPolicy::fixed("test", Some(1000), Some(64));
        let d = Device::hybrid(&gpu, policy).unwrap();
        assert!(Device::hybrid(&Device::cpu(), DispatchPolicy::fixed("x", None, None)).is_err());

        // New data stays on the host; small ops run on the CPU.
        let small = d.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
        assert_eq!(side(&small), "cpu");
        assert_eq!(side(&small.relu().unwrap()), "cpu");

        // Large ops move their host inputs to the adapter and leave results there.
        let big = d.tensor(&vec![1.5f32; 2000], &[2000]).unwrap();
        let doubled = big.add(&big).unwrap();
        assert_eq!(side(&doubled), "adapter");
        let total = doubled.reshape(&[2, 1000]).unwrap().sum_last().unwrap();
        assert_eq!(side(&total), "adapter"); // reads 2000 elements

        // A small op on adapter data: the data comes back, the op runs on the CPU.
        let scaled = total.scale(0.5).unwrap();
        assert_eq!(side(&scaled), "cpu");
        assert_eq!(scaled.read_blocking().unwrap(), vec![1500.0, 1500.0]);

        // Products by their square-equivalent side.
        let a = d.tensor(&vec![0.5f32; 32 * 32], &[32, 32]).unwrap();
        assert_eq!(side(&a.matmul(&a).unwrap()), "cpu");
        let b = d.tensor(&vec![0.25f32; 128 * 128], &[128, 128]).unwrap();
        let p = b.matmul_with(&b, MatmulOptions::default()).unwrap();
        assert_eq!(side(&p), "adapter");
        assert!(p.read_blocking().unwrap().iter().all(|&v| v == 8.0));
    }
}
