//! How a recorded batch executes: which ops fold into which kernels, when each value dies,
//! and the encoding of every kernel through the tensor ops.

use std::collections::HashMap;

use super::{missing, Batch, BatchResult, Node, Op, Output, Value};
use crate::error::{Error, Result};
use crate::ops::fused::{Expr, MAX_FUSED_OPS, MAX_INPUTS};
use crate::ops::{Activation, BinaryOp, MatmulOptions, UnaryOp};
use crate::tensor::Tensor;

/// How a batch executes: which nodes fold into which, and when each value dies.
pub(super) struct Plan {
    /// For a node that runs: its fused expression and leaves, if it is a fusion root.
    fused: HashMap<usize, (Expr, Vec<usize>)>,
    /// Nodes folded into another kernel (not run themselves).
    folded: Vec<bool>,
    /// Matmul nodes that absorb a following node: (matmul, bias, activation) by absorber.
    epilogue: HashMap<usize, (usize, Option<Value>, Option<Activation>)>,
    /// The nodes whose last reader is each node (`last_use` inverted, so freeing is linear).
    dies_at: Vec<Vec<usize>>,
    /// Values that must lie row-major in their storage (outputs, and what fused kernels read):
    /// a view made by an `apply` (a slice, say) is copied out for them, and read in place by
    /// the tensor ops that take views.
    dense: Vec<bool>,
    kernels: usize,
}

impl Plan {
    pub(super) fn new(batch: &Batch) -> Result<Plan> {
        let n = batch.nodes.len();
        if batch.outputs.is_empty() {
            return Err(Error::InvalidArgument {
                op: "batch run",
                reason: "no output marked (call `output`)".into(),
            });
        }
        let is_output = |i: usize| batch.outputs.iter().any(|v| v.index == i);
        let mut uses = vec![0usize; n];
        let mut last_use: Vec<usize> = (0..n).collect();
        for (i, node) in batch.nodes.iter().enumerate() {
            // Readers are counted once each: `add(s, s)` can still inline `s`.
            let all: Vec<usize> = node.op.inputs().iter().map(|v| v.index).collect();
            for (k, &v) in all.iter().enumerate() {
                if all[..k].contains(&v) {
                    continue;
                }
                uses[v] += 1;
                last_use[v] = i;
            }
        }
        for v in &batch.outputs {
            last_use[v.index] = usize::MAX;
        }
        let single = |i: usize| uses[i] == 1 && !is_output(i);
        let mut folded = vec![false; n];
        // Matmul epilogues: a bias row added to, then an activation of, a single-use matmul.
        let mut epilogue: HashMap<usize, (usize, Option<Value>, Option<Activation>)> =
            HashMap::new();
        let mut mm_state: HashMap<usize, (usize, Option<Value>, Option<Activation>)> =
            HashMap::new();
        for (i, node) in batch.nodes.iter().enumerate() {
            if let Op::Matmul(_, _, o) = &node.op {
                mm_state.insert(i, (i, o.bias, o.activation));
            }
            let (src, bias, act) = match &node.op {
                Op::Binary(BinaryOp::Add, a, b) => {
                    let row = |v: &Value| {
                        let s = &batch.nodes[v.index].shape;
                        s.len() == 1 && Some(&s[0]) == node.shape.last()
                    };
                    if row(b) {
                        (a.index, Some(*b), None)
                    } else if row(a) {
                        (b.index, Some(*a), None)
                    } else {
                        continue;
                    }
                }
                Op::Unary(op, x) => match activation_of(*op) {
                    Some(act) => (x.index, None, Some(act)),
                    None => continue,
                },
                _ => continue,
            };
            let Some(&(mm, mbias, mact)) = mm_state.get(&src) else {
                continue;
            };
            if !single(src) || mact.is_some() || (bias.is_some() && mbias.is_some()) {
                continue;
            }
            let state = (mm, mbias.or(bias), act);
            folded[src] = true;
            epilogue.remove(&src);
            epilogue.insert(i, state);
            mm_state.insert(i, state);
        }
        // Elementwise fusion: absorb single-use elementwise inputs of the same length (not
        // the ones a matmul epilogue took).
        let fusable = |i: usize| single(i) && !epilogue.contains_key(&i);
        let mut fused = HashMap::new();
        for i in (0..n).rev() {
            if folded[i] || epilogue.contains_key(&i) || !is_elementwise(&batch.nodes[i].op) {
                continue;
            }
            let (expr, leaves, inlined) = build_expr(batch, i, &fusable);
            for k in inlined {
                folded[k] = true;
            }
            fused.insert(i, (expr, leaves));
        }
        // Values read by folded nodes are read by their kernel's node: extend lifetimes.
        for (&root, (_, leaves)) in &fused {
            for &l in leaves {
                if last_use[l] != usize::MAX {
                    last_use[l] = last_use[l].max(root);
                }
            }
        }
        for (&at, &(mm, bias, _)) in &epilogue {
            let inputs = batch.nodes[mm].op.inputs();
            for v in inputs.into_iter().chain(bias) {
                if last_use[v.index] != usize::MAX {
                    last_use[v.index] = last_use[v.index].max(at);
                }
            }
        }
        let kernels = (0..n)
            .filter(|&i| {
                !folded[i] && !matches!(batch.nodes[i].op, Op::Input | Op::Tensor | Op::Reshape(_))
            })
            .count();
        // A value nobody reads and nobody asked for dies where it is made (at == k): left alive
        // to the end of the run, it would be freed after a capture ends, back to the pool,
        // while the compiled graph's replays still write it (found by the random batch test
        // as other threads' tensors changing on CUDA and Vulkan).
        let mut dies_at = vec![Vec::new(); n];
        for (k, &at) in last_use.iter().enumerate() {
            if at < n {
                dies_at[at].push(k);
            }
        }
        let mut dense = vec![false; n];
        for v in &batch.outputs {
            dense[v.index] = true;
        }
        for (_, leaves) in fused.values() {
            for &l in leaves {
                dense[l] = true;
            }
        }
        Ok(Plan {
            dense,
            fused,
            folded,
            epilogue,
            dies_at,
            kernels,
        })
    }

    /// Encodes every kernel, freeing each value after its last reader.
    pub(super) fn execute(&self, batch: &Batch) -> Result<HashMap<usize, Tensor>> {
        let mut live: HashMap<usize, Tensor> = HashMap::new();
        for (i, node) in batch.nodes.iter().enumerate() {
            if self.folded[i] {
                continue;
            }
            let get = |v: Value| live.get(&v.index).ok_or_else(missing);
            let at = |e: Error| match e {
                Error::InvalidArgument { op, reason } => Error::InvalidArgument {
                    op,
                    reason: format!("{reason} (batch op {i}, {})", node.op.name()),
                },
                other => other,
            };
            let t = if let Some((expr, leaves)) = self.fused.get(&i) {
                let ts = leaves
                    .iter()
                    .map(|&l| live.get(&l).ok_or_else(missing))
                    .collect::<Result<Vec<_>>>()?;
                crate::ops::fused::run(expr, &ts, node.len(), node.shape.clone()).map_err(at)?
            } else if let Some(&(mm, bias, act)) = self.epilogue.get(&i) {
                let Op::Matmul(a, b, o) = &batch.nodes[mm].op else {
                    return Err(missing());
                };
                let bias = bias.map(get).transpose()?;
                let options = MatmulOptions {
                    transpose_a: o.transpose_a,
                    transpose_b: o.transpose_b,
                    bias,
                    activation: act,
                    precision: o.precision,
                    tile: None,
                };
                get(*a)?.matmul_with(get(*b)?, options).map_err(at)?
            } else {
                run_node(node, &get).map_err(at)?
            };
            let t = if self.dense[i] && !t.is_contiguous() {
                t.contiguous()?
            } else {
                t
            };
            live.insert(i, t);
            // Free what this node read last (the planner's reuse).
            for &k in &self.dies_at[i] {
                if !matches!(batch.nodes[k].op, Op::Input | Op::Tensor) {
                    live.remove(&k);
                }
            }
        }
        Ok(live)
    }

    pub(super) async fn read(
        &self,
        batch: &Batch,
        values: &HashMap<usize, Tensor>,
        taken: Option<u64>,
    ) -> Result<BatchResult> {
        let outs = batch
            .outputs
            .iter()
            .map(|v| values.get(&v.index).ok_or_else(missing))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<_> = outs.iter().map(|t| (t.storage(), t.words())).collect();
        let data = match batch.device.backend().read_many(&refs).await? {
            Some(words) => values_of(&outs, words),
            // Read each output where it is.
            None => {
                let mut all = Vec::with_capacity(outs.len());
                for t in &outs {
                    all.push(t.read_words().await?);
                }
                values_of(&outs, all)
            }
        };
        let peak = taken.unwrap_or_else(|| self.simulated_peak(batch));
        Ok(self.result(batch, data, peak, self.kernels))
    }

    pub(super) fn result(
        &self,
        batch: &Batch,
        data: Vec<Output>,
        peak: u64,
        kernels: usize,
    ) -> BatchResult {
        let fused_ops = self.folded.iter().filter(|&&f| f).count();
        BatchResult {
            outputs: batch.outputs.iter().copied().zip(data).collect(),
            order: batch.outputs.clone(),
            peak_bytes: peak,
            unplanned_bytes: batch
                .nodes
                .iter()
                .filter(|n| n.tensor.is_none())
                .map(|n| n.len() as u64 * 4)
                .sum(),
            kernels,
            fused_ops,
        }
    }

    /// The bytes live at the busiest point of the plan (the CPU backend's figure).
    pub(super) fn simulated_peak(&self, batch: &Batch) -> u64 {
        let mut live = 0u64;
        let mut peak = 0u64;
        let bytes = |i: usize| batch.nodes[i].len() as u64 * 4;
        for i in 0..batch.nodes.len() {
            // Uploads and tensors exist from record time: not the run's memory.
            if self.folded[i] || batch.nodes[i].tensor.is_some() {
                continue;
            }
            live += bytes(i);
            peak = peak.max(live);
            for &k in &self.dies_at[i] {
                if !self.folded[k] && batch.nodes[k].tensor.is_none() {
                    live -= bytes(k);
                }
            }
        }
        peak
    }
}

fn activation_of(op: UnaryOp) -> Option<Activation> {
    match op {
        UnaryOp::Relu => Some(Activation::Relu),
        UnaryOp::Gelu => Some(Activation::Gelu),
        UnaryOp::GeluTanh => Some(Activation::GeluTanh),
        UnaryOp::Silu => Some(Activation::Silu),
        _ => None,
    }
}

fn is_elementwise(op: &Op) -> bool {
    matches!(op, Op::Unary(..) | Op::Binary(..))
}

/// How one fusion root's expression is being built: its leaves, the nodes it has inlined (in
/// order, with their expressions, so a value read twice is expanded the same way twice), and
/// the ops it may still add.
struct Fusion<'b, F> {
    batch: &'b Batch,
    single: &'b F,
    leaves: Vec<usize>,
    inlined: Vec<usize>,
    memo: HashMap<usize, (Expr, usize)>,
    budget: usize,
    max_leaves: usize,
}

impl<F: Fn(usize) -> bool> Fusion<'_, F> {
    /// The expression of root `i`. A root's children always fit, at worst as leaves (at most
    /// two, and the first keeps a leaf free for the second), so the fallbacks never run.
    fn root(&mut self, i: usize) -> Expr {
        self.budget -= 1;
        match &self.batch.nodes[i].op {
            Op::Unary(op, x) => {
                let x = self.child(x.index, i).unwrap_or(Expr::Input(0));
                Expr::Unary(*op, Box::new(x))
            }
            Op::Binary(op, a, b) => {
                // The first operand leaves a leaf free for the second.
                self.max_leaves = MAX_INPUTS - 1;
                let ea = self.child(a.index, i).unwrap_or(Expr::Input(0));
                self.max_leaves = MAX_INPUTS;
                let eb = self.child(b.index, i).unwrap_or(Expr::Input(0));
                Expr::Binary(*op, Box::new(ea), Box::new(eb))
            }
            _ => Expr::Input(0),
        }
    }

    /// Input `v` of node `parent`: inlined when it is a single-use elementwise node of the
    /// same length and its subtree fits the leaves and the op budget, else a leaf. `None` when
    /// not even a leaf fits (the caller then becomes a leaf itself).
    fn child(&mut self, v: usize, parent: usize) -> Option<Expr> {
        if let Some((e, size)) = self.memo.get(&v) {
            if *size <= self.budget {
                self.budget -= size;
                return Some(e.clone());
            }
            return None;
        }
        let nodes = &self.batch.nodes;
        let inlinable = nodes[v].len() == nodes[parent].len()
            && is_elementwise(&nodes[v].op)
            && (self.single)(v)
            && !self.leaves.contains(&v);
        if inlinable && self.budget > 0 {
            let saved = (self.leaves.len(), self.inlined.len(), self.budget);
            if let Some(e) = self.inline(v) {
                let size = saved.2 - self.budget;
                self.inlined.push(v);
                self.memo.insert(v, (e.clone(), size));
                return Some(e);
            }
            // Roll back what the failed attempt added.
            self.leaves.truncate(saved.0);
            for k in self.inlined.drain(saved.1..) {
                self.memo.remove(&k);
            }
            self.budget = saved.2;
        }
        self.leaf(v)
    }

    /// The expression of inlined node `v`, or `None` if it does not fit.
    fn inline(&mut self, v: usize) -> Option<Expr> {
        self.budget -= 1;
        match &self.batch.nodes[v].op {
            Op::Unary(op, x) => Some(Expr::Unary(*op, Box::new(self.child(x.index, v)?))),
            Op::Binary(op, a, b) => {
                let ea = self.child(a.index, v)?;
                let eb = self.child(b.index, v)?;
                Some(Expr::Binary(*op, Box::new(ea), Box::new(eb)))
            }
            _ => None,
        }
    }

    fn leaf(&mut self, v: usize) -> Option<Expr> {
        if let Some(k) = self.leaves.iter().position(|&l| l == v) {
            return Some(Expr::Input(k));
        }
        if self.leaves.len() >= self.max_leaves {
            return None;
        }
        self.leaves.push(v);
        Some(Expr::Input(self.leaves.len() - 1))
    }
}

/// The expression computing fusion root `i`, its leaves, and the nodes it inlined. At most
/// [`MAX_FUSED_OPS`] ops (counting a value inlined twice twice) go into one kernel, so the
/// expression's depth is bounded: a chain of any length becomes a series of kernels, planned
/// without recursion deeper than that.
fn build_expr(
    batch: &Batch,
    i: usize,
    single: &impl Fn(usize) -> bool,
) -> (Expr, Vec<usize>, Vec<usize>) {
    let mut f = Fusion {
        batch,
        single,
        leaves: Vec::new(),
        inlined: Vec::new(),
        memo: HashMap::new(),
        budget: MAX_FUSED_OPS,
        max_leaves: MAX_INPUTS,
    };
    let expr = f.root(i);
    (expr, f.leaves, f.inlined)
}

/// Runs one unfused node through the tensor API.
fn run_node<'a>(node: &Node, get: &impl Fn(Value) -> Result<&'a Tensor>) -> Result<Tensor> {
    match &node.op {
        Op::Input | Op::Tensor => node.tensor.clone().ok_or_else(missing),
        Op::Unary(op, x) => get(*x)?.unary(*op),
        Op::Binary(op, a, b) => get(*a)?.binary(*op, get(*b)?),
        Op::Matmul(a, b, o) => {
            let bias = o.bias.map(get).transpose()?;
            let options = MatmulOptions {
                transpose_a: o.transpose_a,
                transpose_b: o.transpose_b,
                bias,
                activation: o.activation,
                precision: o.precision,
                tile: None,
            };
            get(*a)?.matmul_with(get(*b)?, options)
        }
        Op::Softmax { x, log: false } => get(*x)?.softmax(),
        Op::Softmax { x, log: true } => get(*x)?.log_softmax(),
        Op::Reduce { op, x, last: false } => get(*x)?.reduce(*op),
        Op::Reduce { op, x, last: true } => get(*x)?.reduce_last(*op),
        Op::Dot(a, b) => get(*a)?.dot(get(*b)?),
        Op::Norm {
            x,
            weight,
            bias,
            eps,
            rms,
        } => {
            let (w, b) = (weight.map(get).transpose()?, bias.map(get).transpose()?);
            if *rms {
                get(*x)?.rms_norm(w, b, *eps)
            } else {
                get(*x)?.layer_norm(w, b, *eps)
            }
        }
        Op::Reshape(x) => get(*x)?.reshape(&node.shape),
        // Fused kernels read storage row-major: the transposed view is copied out.
        Op::Transpose(x, a, b) => get(*x)?.transpose(*a, *b)?.contiguous(),
        Op::Apply(a) => {
            let inputs = a
                .inputs
                .iter()
                .map(|v| get(*v))
                .collect::<Result<Vec<_>>>()?;
            // Views stay views (see `Plan::dense`).
            (a.f)(&inputs)
        }
    }
}

/// Stored words read back for `outs` as f32 values (see [`Tensor::read`]).
pub(super) fn values_of(outs: &[&Tensor], words: Vec<Vec<f32>>) -> Vec<Output> {
    outs.iter()
        .zip(words)
        .map(|(t, w)| match t.dtype() {
            crate::DType::F32 => Output {
                values: w,
                dtype: crate::DType::F32,
                words: None,
            },
            d => Output {
                values: crate::dtype::to_f32(d, &w, t.len()),
                dtype: d,
                words: Some(w),
            },
        })
        .collect()
}
