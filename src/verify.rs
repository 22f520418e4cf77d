//! Verification mode: every op a device runs is computed again on the CPU backend from the
//! same inputs and compared within the op's tolerance ([`Device::with_verification`],
//! `GPUKIT_VERIFY=1` natively, `Gpu.create({ verify: true })` in JS).
//!
//! An op enqueues as usual and records a check: its inputs, its output and how to run it
//! again. The checks run at the next wait (a read, `synchronize`, a batch run), where the
//! inputs and output are read back, the inputs uploaded to the CPU backend and the op run
//! there; the first output outside its tolerance is an [`Error::Verification`] naming the op,
//! the input shapes and the error. The cost is a read back of every op's inputs and output and
//! the op on the CPU: expect a slowdown of the order of the CPU backend's time plus one round
//! trip per op. Quantized matmul and dequantization are not checked (their CPU copy would need
//! the quantized bytes, which the device does not keep), nor the ops inside a compiled graph's
//! replay on wgpu (a replay does not go through the ops).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How closely an op's result must match the CPU backend's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tol {
    /// Copies, gathers, selections: the same bits (any NaN matches any NaN).
    Exact,
    /// Elementwise ops: relative 1e-4, absolute 4e-6 (transcendental functions differ by a few
    /// ulp, and `exp(x) - 1` near 0 loses digits).
    Elementwise,
    /// Sums in another order (reductions, softmax, norms, products, attention): 1e-3 of the
    /// value or of the output's mean magnitude, whichever is larger.
    Accumulate,
    /// Products with inputs rounded to f16, bf16 or tf32: 2e-2 on the same scale.
    Reduced,
}

impl Tol {
    fn relative(self) -> f64 {
        match self {
            Tol::Exact => 0.0,
            Tol::Elementwise => 1e-4,
            Tol::Accumulate => 1e-3,
            Tol::Reduced => 2e-2,
        }
    }
}

#[cfg(native)]
type Rerun = Box<dyn Fn(&[&Tensor]) -> Result<Tensor> + Send + Sync>;
#[cfg(web)]
type Rerun = Box<dyn Fn(&[&Tensor]) -> Result<Tensor>>;

struct Check {
    op: &'static str,
    inputs: Vec<Tensor>,
    output: Tensor,
    tol: Tol,
    rerun: Rerun,
}

/// What verification mode has checked on a device, per op.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// One entry per op name, in the order first checked.
    pub ops: Vec<VerifiedOp>,
}

/// The checks of one op (in JSON, as in JS: `op`, `checked`, `elements`, `maxError`,
/// `tolerance`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifiedOp {
    /// The op.
    pub op: &'static str,
    /// How many of its results were compared.
    pub checked: u64,
    /// How many elements were compared.
    pub elements: u64,
    /// The largest error seen, as a fraction of the tolerance's scale (0 = identical).
    pub max_error: f64,
    /// The relative tolerance it was held to.
    pub tolerance: f64,
}

impl VerifyReport {
    /// Checks over every op.
    pub fn checked(&self) -> u64 {
        self.ops.iter().map(|o| o.checked).sum()
    }
}

/// A device's verification state.
#[derive(Default)]
pub(crate) struct Verifier {
    on: AtomicBool,
    pending: Mutex<Vec<Check>>,
    report: Mutex<VerifyReport>,
    cpu: Mutex<Option<Device>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Verifier {
    pub(crate) fn enable(&self) {
        lock(&self.cpu).get_or_insert_with(Device::cpu_quiet);
        self.on.store(true, Ordering::Relaxed);
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn report(&self) -> Option<VerifyReport> {
        self.is_on().then(|| lock(&self.report).clone())
    }

    fn record(&self, check: Check) {
        lock(&self.pending).push(check);
    }

    /// Runs every recorded check (see the module docs).
    pub(crate) async fn run(&self, device: &Device) -> Result<()> {
        if !self.is_on() {
            return Ok(());
        }
        let checks = std::mem::take(&mut *lock(&self.pending));
        let Some(cpu) = lock(&self.cpu).clone() else {
            return Ok(());
        };
        for check in checks {
            // One read loop (one await: the read's state machine once in the package), the
            // inputs then the output.
            let mut host = Vec::with_capacity(check.inputs.len() + 1);
            let inputs = check
                .inputs
                .iter()
                .map(Tensor::contiguous)
                .collect::<Result<Vec<_>>>()?;
            for t in inputs.iter().chain([&check.output]) {
                host.push(device.backend().read(t.storage(), t.words()).await?);
            }
            let out = &check.output;
            let got = crate::dtype::to_f32(out.dtype(), &host.pop().unwrap_or_default(), out.len());
            let cpu_inputs = check
                .inputs
                .iter()
                .zip(&host)
                .map(|(t, data)| cpu.tensor_words(data, t.shape(), t.dtype()))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = cpu_inputs.iter().collect();
            let want_t = (check.rerun)(&refs)?;
            let want_words = &want_t.storage().as_cpu()?.data()[..want_t.words()];
            let want = &crate::dtype::to_f32(want_t.dtype(), want_words, want_t.len());
            let shapes = || check.inputs.iter().map(|t| t.shape().to_vec()).collect();
            let error = compare(&got, want, check.tol).map_err(|detail| Error::Verification {
                op: check.op,
                backend: device.info().backend,
                shapes: shapes(),
                detail,
            })?;
            let mut report = lock(&self.report);
            let i = match report.ops.iter().position(|o| o.op == check.op) {
                Some(i) => i,
                None => {
                    report.ops.push(VerifiedOp {
                        op: check.op,
                        checked: 0,
                        elements: 0,
                        max_error: 0.0,
                        tolerance: check.tol.relative(),
                    });
                    report.ops.len() - 1
                }
            };
            let entry = &mut report.ops[i];
            entry.checked += 1;
            entry.elements += got.len() as u64;
            entry.max_error = entry.max_error.max(error);
        }
        Ok(())
    }
}

/// The largest error of `got` against `want` as a fraction of the tolerance's scale, or what
/// is wrong at the first element out of tolerance.
fn compare(got: &[f32], want: &[f32], tol: Tol) -> std::result::Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!(
            "{} elements, the CPU gives {}",
            got.len(),
            want.len()
        ));
    }
    let finite = want.iter().filter(|v| v.is_finite());
    let (sum, count) = finite.fold((0.0f64, 0usize), |(s, c), &v| (s + v.abs() as f64, c + 1));
    let floor = if count == 0 { 0.0 } else { sum / count as f64 };
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if tol == Tol::Exact || w.is_infinite() || g.is_infinite() {
            g.to_bits() == w.to_bits() || g == w
        } else {
            // Elementwise values are held to their own size down to 0.04 (an absolute 4e-6,
            // twice the op suite's tolerance against f64 for transcendental functions);
            // accumulated ones to the output's mean magnitude at least.
            let scale = match tol {
                Tol::Elementwise => (w.abs() as f64).max(0.04),
                _ => (w.abs() as f64).max(floor).max(1e-30),
            };
            let e = (g as f64 - w as f64).abs() / scale;
            worst = worst.max(e / tol.relative());
            e <= tol.relative()
        };
        if !ok {
            return Err(format!(
                "element {i} is {g}, the CPU backend gives {w} (relative tolerance {})",
                tol.relative()
            ));
        }
    }
    Ok(worst)
}

impl Device {
    /// Turns verification mode on for this device (every clone shares it) and returns it: each
    /// op is computed again on the CPU backend and compared within its tolerance when the
    /// next read, `synchronize` or batch run waits, and the first divergence is an
    /// [`Error::Verification`]. See [`crate::verify`] for what it costs. Natively,
    /// `GPUKIT_VERIFY=1` turns it on for every device opened on a GPU.
    ///
    /// ```no_run
    /// # fn main() -> gpukit::Result<()> {
    /// let device = gpukit::Device::new_blocking()?.with_verification();
    /// let x = device.tensor(&[1.0, -2.0, 3.0], &[3])?;
    /// x.relu()?.softmax()?.read_blocking()?; // checked against the CPU backend here
    /// println!("{:?}", device.verification_report());
    /// # Ok(()) }
    /// ```
    pub fn with_verification(self) -> Device {
        self.verifier().enable();
        self
    }

    /// What verification mode has checked so far; `None` when it is off.
    pub fn verification_report(&self) -> Option<VerifyReport> {
        self.verifier().report()
    }

    /// Runs the checks recorded since the last wait (nothing when verification is off).
    pub(crate) async fn verify_pending(&self) -> Result<()> {
        self.verifier().run(self).await
    }
}

impl Tensor {
    /// Records a check of this tensor, the result of `op` on `inputs`, when the device
    /// verifies; `rerun` computes it again from the inputs' CPU copies. Generic only in the
    /// closure, boxed at once: every op's check shares one recording function.
    #[inline]
    pub(crate) fn verified<const N: usize>(
        self,
        op: &'static str,
        inputs: [&Tensor; N],
        tol: Tol,
        rerun: impl Fn(&[&Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Result<Tensor> {
        self.verified_many(op, &inputs, tol, rerun)
    }

    /// [`Tensor::verified`] with inputs known only at run time (concat, batch kernels).
    #[inline]
    pub(crate) fn verified_many(
        self,
        op: &'static str,
        inputs: &[&Tensor],
        tol: Tol,
        rerun: impl Fn(&[&Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Result<Tensor> {
        if self.device().verifier().is_on() {
            self.record_check(op, inputs, tol, Box::new(rerun));
        }
        Ok(self)
    }

    #[inline(never)]
    fn record_check(&self, op: &'static str, inputs: &[&Tensor], tol: Tol, rerun: Rerun) {
        self.device().verifier().record(Check {
            op,
            inputs: inputs.iter().map(|&t| t.clone()).collect(),
            output: self.clone(),
            tol,
            rerun,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An op whose device result differs from its CPU copy is an Error::Verification at the
    /// next read, naming the op and the input shapes; agreeing ops fill the report.
    #[cfg(native)]
    #[test]
    fn a_divergence_is_an_error_at_the_next_wait() {
        let dev = Device::cpu().with_verification();
        let x = dev.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
        let y = x.relu().unwrap().scale(2.0).unwrap();
        assert_eq!(y.read_blocking().unwrap(), vec![2.0, 0.0, 6.0]);
        let report = dev.verification_report().unwrap();
        let names: Vec<&str> = report.ops.iter().map(|o| o.op).collect();
        assert_eq!(names, ["relu", "scale"]);
        assert_eq!(report.checked(), 2);
        // A check whose CPU copy computes something else: relu recorded as if it were neg.
        let wrong = x.relu().unwrap();
        let wrong = wrong
            .verified("relu", [&x], Tol::Exact, |t| t[0].neg())
            .unwrap();
        match wrong.read_blocking() {
            Err(Error::Verification { op, shapes, .. }) => {
                assert_eq!((op, shapes), ("relu", vec![vec![3]]));
            }
            other => panic!("expected a verification error, got {other:?}"),
        }
        // Off by default, and then nothing is recorded.
        let plain = Device::cpu();
        plain.tensor(&[1.0], &[1]).unwrap().relu().unwrap();
        assert!(plain.verification_report().is_none());
    }

    #[test]
    fn compare_holds_each_class_to_its_tolerance() {
        assert!(compare(&[1.0, f32::NAN], &[1.0, f32::NAN], Tol::Exact).is_ok());
        assert!(compare(&[1.0], &[1.0000001], Tol::Exact).is_err());
        assert!(compare(&[1.00001], &[1.0], Tol::Elementwise).is_ok());
        assert!(compare(&[1.001], &[1.0], Tol::Elementwise).is_err());
        // A value near zero among large ones is held to the mean magnitude.
        assert!(compare(&[1e-4, 100.0], &[0.0, 100.0], Tol::Accumulate).is_ok());
        assert!(compare(&[1.0, 100.0], &[0.0, 100.0], Tol::Accumulate).is_err());
        assert!(compare(&[f32::INFINITY], &[f32::INFINITY], Tol::Accumulate).is_ok());
        assert!(compare(&[f32::INFINITY], &[1e30], Tol::Accumulate).is_err());
        assert!(compare(&[f32::NAN], &[0.0], Tol::Reduced).is_err());
        assert!(compare(&[1.0], &[1.0, 2.0], Tol::Reduced).is_err());
    }
}
