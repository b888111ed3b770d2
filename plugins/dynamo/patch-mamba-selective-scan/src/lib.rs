//! Mamba's selective scan without `mamba_ssm`'s kernel
//! (`mamba_selective_scan`) runs the recurrence
//! `h_t = exp(A·dt_t)·h_{t-1} + dt_t·B_t·u_t`, `y_t = C_t·h_t` as a Python
//! `for index in range(seq_len)`: torch.export unrolls the loop at the traced
//! length, and a dynamic export is valid at that length only. Here the same
//! recurrence is a program whose size does not depend on the length.
//!
//! The sequence (time first: `(L, batch, D)`) is padded to
//! `16 * (L // 16 + 2)` positions, chunks of 16, with neutral steps: dt is
//! computed first (bias, softplus) and padded with 0, so a padded step neither
//! decays the state (`exp(A·0)` is 1) nor adds to it (its input is scaled by
//! dt); u, B and C are padded with 0. Then, for every chunk at once:
//!
//! 1. a fixed loop of 16 steps gives each chunk's end state from a zero start;
//! 2. the chunks' own recurrence (decay `exp(A·Σdt)` over the chunk, input the
//!    chunk's end state) gives the state entering each chunk: that recurrence
//!    is solved the same way one level down (chunks of 16 chunks), and the few
//!    chunks left at the bottom (`L/256 + 2` or so) in closed form,
//!    `H_k = Σ_{j≤k} exp(Λ_k − Λ_j)·E_j` with `Λ` the cumulative log decay, the
//!    pairs `j > k` masked to −inf before `exp`, so every exponent is ≤ 0 (A is
//!    `-exp(A_log)`, dt ≥ 0): no `exp` of a growing cumulative sum, no
//!    division by a vanishing product;
//! 3. the 16 steps again from that entering state, each step's `C_t·h_t`
//!    taken as it goes, so the per-position states are never stored.
//!
//! Every decay multiplied is a product of factors ≤ 1, as in the loop. The
//! final state (`return_last_state`) is the state after the last chunk, which
//! the padded steps leave as it was after position L − 1.
//!
//! Why not the closed form over the whole sequence, or Mamba2's SSD chunks:
//! Mamba1's decay differs per channel *and* per state (A is `(D, N)`, where
//! Mamba2's is one scalar per head), so a pairwise decay matrix has D·N
//! entries per pair of positions. For Mamba-130M (D = 1536, N = 16) at 512
//! tokens the whole-sequence form holds L²·D·N = 6.4e9 floats (26 GB) per
//! layer; SSD's intra-chunk matrices plus inter-chunk decays hold
//! L·c·D·N + (L/c)²·D·N, 1.9e8 floats (760 MB) at its best chunk (c ≈ 10).
//! This program holds the decays and inputs of every (padded) position, as
//! the loop holds its `discrete_A` and `deltaB_u`: 2.7e7 floats (107 MB) at
//! 512 tokens. The closed form at the bottom holds (L/256 + 2)²·D·N floats
//! (4e5 at 512 tokens, 8e6 at 4096) and outgrows them only past about 130000
//! tokens. The costs: about 330 ATen nodes per call whatever the length (the
//! unrolled loop has about 6 per position), twice the loop's elementwise work
//! (the 16 steps run twice), and a slower trace. At those sizes and 512
//! tokens one call ran in 0.58 s in ONNX Runtime on 2 loaded cores, the loop
//! unrolled into a static export in 0.68 s; against the loop in float32 its
//! output is off by 2e-7 of its largest value, with decays from exp(-16000)
//! to nearly 1.
//!
//! Semantics kept: `delta_bias` added as `dt + delta_bias.to(dt.dtype)[..., None]`,
//! `delta_softplus`, `D` added as `hidden_states * D[None, :, None]`, the
//! output multiplied by `silu(z)`, the state in float32. One rounding differs
//! for half-precision models: the loop rounds the state to the input's dtype
//! before `C_t·h_t`; here the product is taken in float32 and the output
//! rounded (the state itself is float32 in both). At a fixed length the call
//! passes through: the unrolled loop is exact there.
//!
//! The same function, verbatim, is copied into FalconMamba, Jamba and Zamba
//! (Zamba calls it once per Mamba head); each copy is its own target.

use hfx_sdk::prelude::*;

// The scan's parameters by position (the `TARGETS` the macro declares share
// one signature).
const HIDDEN_STATES: usize = 0;
const DT: usize = 1;
const A: usize = 2;
const B: usize = 3;
const C: usize = 4;
const D: usize = 5;
const Z: usize = 6;
const DELTA_BIAS: usize = 7;
const DELTA_SOFTPLUS: usize = 8;
const RETURN_LAST_STATE: usize = 9;

/// Positions per chunk: the length of the fixed loops.
const CHUNK: i64 = 16;
/// Chunked levels below the sequence's own before the closed form.
const LEVELS_BELOW: usize = 1;

#[hfx_sdk::patch(targets = [
    "transformers.models.mamba.modeling_mamba.mamba_selective_scan",
    "transformers.models.falcon_mamba.modeling_falcon_mamba.mamba_selective_scan",
    "transformers.models.jamba.modeling_jamba.mamba_selective_scan",
    "transformers.models.zamba.modeling_zamba.mamba_selective_scan",
])]
fn patch_mamba_selective_scan(call: PatchedCall) -> Result<Program> {
    if !TARGETS.contains(&call.target.as_str()) {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    let target = call.target.clone();
    let missing = |name: &str| error(format!("{target}: no `{name}` argument"), None);
    let hidden =
        call.param(HIDDEN_STATES, "hidden_states").ok_or_else(|| missing("hidden_states"))?;
    let dt = call.param(DT, "dt").ok_or_else(|| missing("dt"))?;
    let a = call.param(A, "A").ok_or_else(|| missing("A"))?;
    let b = call.param(B, "B").ok_or_else(|| missing("B"))?;
    let c = call.param(C, "C").ok_or_else(|| missing("C"))?;
    let optional = |index: usize, name: &str| {
        call.param(index, name).filter(|&slot| !call.is_none(Some(slot)))
    };
    let (d, z, bias) = (optional(D, "D"), optional(Z, "z"), optional(DELTA_BIAS, "delta_bias"));
    let flag = |index: usize, name: &str| match call.param(index, name) {
        None => Ok(false),
        Some(slot) => call
            .boolean(slot)
            .ok_or_else(|| error(format!("{target}: `{name}` is not a plain bool"), None)),
    };
    let softplus = flag(DELTA_SOFTPLUS, "delta_softplus")?;
    let last_state = flag(RETURN_LAST_STATE, "return_last_state")?;

    // A fixed length unrolls exactly; shapes the loop itself would not take
    // (its own error is the right one) pass through too.
    let rank = |slot: Slot| call.tensor(slot).map(|t| t.rank());
    let ranks = [rank(hidden), rank(dt), rank(a), rank(b), rank(c)];
    let dynamic = call.tensor(hidden).is_some_and(|t| t.symbolic_dim(2));
    if !dynamic || ranks != [Some(3), Some(3), Some(2), Some(3), Some(3)] {
        return Ok(ProgramBuilder::passthrough(&call));
    }

    let mut s = Scan::new(&call);
    let out = s.selective_scan(Inputs { hidden, dt, a, b, c, d, z, bias, softplus, last_state });
    Ok(s.p.finish(out))
}

/// The call's values the program reads.
struct Inputs {
    hidden: Slot,
    dt: Slot,
    a: Slot,
    b: Slot,
    c: Slot,
    d: Option<Slot>,
    z: Option<Slot>,
    bias: Option<Slot>,
    softplus: bool,
    last_state: bool,
}

/// The program under construction and the constants it reuses.
struct Scan {
    p: ProgramBuilder,
    zero: Slot,
    one: Slot,
    two: Slot,
    minus_one: Slot,
    chunk: Slot,
    fill: Slot,
    steps: Vec<Slot>,
}

impl Scan {
    fn new(call: &PatchedCall) -> Self {
        let mut p = ProgramBuilder::new(call);
        let (zero, one, two, minus_one) = (p.int(0), p.int(1), p.int(2), p.int(-1));
        let chunk = p.int(CHUNK);
        let fill = p.float(0.0);
        let steps = (0..CHUNK).map(|j| p.int(j)).collect();
        Scan { p, zero, one, two, minus_one, chunk, fill, steps }
    }

    fn call(&mut self, op: &str, args: &[Slot]) -> Slot {
        self.p.call(op, args)
    }

    fn mul(&mut self, x: Slot, y: Slot) -> Slot {
        self.call("torch.mul", &[x, y])
    }

    fn add(&mut self, x: Slot, y: Slot) -> Slot {
        self.call("torch.add", &[x, y])
    }

    fn unsqueeze(&mut self, x: Slot, dim: Slot) -> Slot {
        self.call("torch.Tensor.unsqueeze", &[x, dim])
    }

    /// `x.select(1, j)` for every j: each step of every chunk, as views.
    fn steps(&mut self, x: Slot) -> Vec<Slot> {
        let one = self.one;
        let steps = self.steps.clone();
        steps.into_iter().map(|j| self.call("torch.Tensor.select", &[x, one, j])).collect()
    }

    /// `constant_pad_nd` on axis 0 of a tensor of `rank` axes (its pairs run
    /// from the last axis).
    fn pad_axis0(&mut self, x: Slot, rank: usize, before: Slot, after: Slot) -> Slot {
        let mut amounts = vec![self.zero; 2 * (rank - 1)];
        amounts.extend([before, after]);
        let amounts = self.p.pack(&amounts);
        let fill = self.fill;
        self.call("torch.constant_pad_nd", &[x, amounts, fill])
    }

    /// `(T, ...)` padded with zeros to `CHUNK * (T // CHUNK + 2)` and split
    /// into `(T // CHUNK + 2, CHUNK, ...)`. At least one whole chunk of
    /// padding and never a single chunk: a traced length that made the padding
    /// 0 or the chunk count 1 would have torch.export guard on it.
    fn chunked(&mut self, x: Slot, rank: usize) -> Slot {
        let length = self.p.size(x, 0);
        let whole = self.call("operator.floordiv", &[length, self.chunk]);
        let chunks = self.call("operator.add", &[whole, self.two]);
        let padded = self.call("operator.mul", &[self.chunk, chunks]);
        let pad = self.call("operator.sub", &[padded, length]);
        let zero = self.zero;
        let x = self.pad_axis0(x, rank, zero, pad);
        let shape = self.p.pack(&[self.minus_one, self.chunk]);
        self.call("torch.Tensor.unflatten", &[x, self.zero, shape])
    }

    /// `(chunks, CHUNK, ...)` back to `(length, ...)`.
    fn unchunked(&mut self, x: Slot, length: Slot) -> Slot {
        let (zero, one) = (self.zero, self.one);
        let x = self.call("torch.Tensor.flatten", &[x, zero, one]);
        self.p.narrow(x, zero, zero, length)
    }

    /// Per chunk, the state entering it, and the inclusive end states of the
    /// chunks: the recurrence over chunks (`decay` their summed log decays,
    /// `(chunks, ...)` of `rank` axes) solved `levels` levels down.
    fn entering(
        &mut self,
        decays: &[Slot],
        inputs: &[Slot],
        total: Slot,
        rank: usize,
        levels: usize,
    ) -> (Slot, Slot) {
        let mut end = inputs[0];
        for j in 1..decays.len() {
            let kept = self.mul(decays[j], end);
            end = self.add(kept, inputs[j]);
        }
        let ends = self.scan(total, end, rank, levels);
        let chunks = self.p.size(end, 0);
        let (zero, one) = (self.zero, self.one);
        let shifted = self.pad_axis0(ends, rank, one, zero);
        let entering = self.p.narrow(shifted, zero, zero, chunks);
        (entering, ends)
    }

    /// Every state of `h_t = exp(la_t)·h_{t-1} + x_t` from `h_-1 = 0`, for
    /// `la` (≤ 0) and `x` of `(T, ...)`, `rank` axes.
    fn scan(&mut self, la: Slot, x: Slot, rank: usize, levels: usize) -> Slot {
        if levels == 0 {
            return self.closed_form(la, x, rank);
        }
        let length = self.p.size(x, 0);
        let la = self.chunked(la, rank);
        let decays = self.call("torch.exp", &[la]);
        let decays = self.steps(decays);
        let x = self.chunked(x, rank);
        let inputs = self.steps(x);
        let one = self.one;
        let total = self.call("torch.sum", &[la, one]);
        let (mut h, _) = self.entering(&decays, &inputs, total, rank, levels - 1);
        let mut states = Vec::with_capacity(self.steps.len());
        for j in 0..self.steps.len() {
            let kept = self.mul(decays[j], h);
            h = self.add(kept, inputs[j]);
            states.push(h);
        }
        let states = self.p.pack(&states);
        let states = self.call("torch.stack", &[states, one]);
        self.unchunked(states, length)
    }

    /// `H_t = Σ_{s≤t} exp(cum_t − cum_s)·x_s`, `cum` the cumulative sum of
    /// `la` over axis 0, the pairs `s > t` masked to −inf before `exp`.
    fn closed_form(&mut self, la: Slot, x: Slot, rank: usize) -> Slot {
        let (zero, one) = (self.zero, self.one);
        let length = self.p.size(la, 0);
        let cum = self.call("torch.cumsum", &[la, zero]);
        let to = self.unsqueeze(cum, one);
        let from = self.unsqueeze(cum, zero);
        let exponent = self.call("torch.sub", &[to, from]);
        let pairs = self.p.pack(&[length, length]);
        let ones = self.call("torch.Tensor.new_ones", &[la, pairs]);
        let lower = self.call("torch.Tensor.tril", &[ones]);
        let mut later = self.call("torch.Tensor.logical_not", &[lower]);
        for _ in 1..rank {
            let last = self.minus_one;
            later = self.unsqueeze(later, last);
        }
        let inf = self.p.lookup("math.inf");
        let minus_inf = self.call("operator.neg", &[inf]);
        let exponent = self.call("torch.Tensor.masked_fill", &[exponent, later, minus_inf]);
        let weights = self.call("torch.exp", &[exponent]);
        let x = self.unsqueeze(x, zero);
        let terms = self.mul(weights, x);
        self.call("torch.sum", &[terms, one])
    }

    fn selective_scan(&mut self, i: Inputs) -> Slot {
        let (zero, one, two, minus_one) = (self.zero, self.one, self.two, self.minus_one);

        // dt as the loop computes it, before padding.
        let mut dt = i.dt;
        if let Some(bias) = i.bias {
            let dtype = self.p.getattr(dt, "dtype");
            let bias = self.call("torch.Tensor.to", &[bias, dtype]);
            let bias = self.unsqueeze(bias, minus_one);
            dt = self.add(dt, bias);
        }
        if i.softplus {
            dt = self.call("torch.nn.functional.softplus", &[dt]);
        }

        // Time first, in chunks: (chunks, CHUNK, batch, D or N).
        let length = self.p.size(i.hidden, 2);
        let time_first = self.p.pack(&[two, zero, one]);
        let time_chunks = |s: &mut Self, x: Slot| {
            let x = s.call("torch.Tensor.permute", &[x, time_first]);
            s.chunked(x, 3)
        };
        let dt_c = time_chunks(self, dt);
        // B, C and u enter the products in float32, as in the loop.
        let float = |s: &mut Self, x: Slot| s.call("torch.Tensor.float", &[x]);
        let u_c = time_chunks(self, i.hidden);
        let u_c = float(self, u_c);
        let b_c = time_chunks(self, i.b);
        let b_c = float(self, b_c);
        let c_c = time_chunks(self, i.c);
        let c_c = float(self, c_c);

        // The decays exp(A·dt) and inputs dt·B·u, (chunks, CHUNK, batch, D, N),
        // as the loop's `discrete_A` and `deltaB_u`.
        let dt_5 = self.unsqueeze(dt_c, minus_one);
        let la = self.mul(i.a, dt_5);
        let decays = self.call("torch.exp", &[la]);
        let decays = self.steps(decays);
        let three = self.p.int(3);
        let b_5 = self.unsqueeze(b_c, three);
        let u_5 = self.unsqueeze(u_c, minus_one);
        let dt_b = self.mul(dt_5, b_5);
        let inputs = self.mul(dt_b, u_5);
        let inputs = self.steps(inputs);
        let c_5 = self.unsqueeze(c_c, three);
        let readouts = self.steps(c_5);
        // A chunk's log decay: A·Σdt over its steps.
        let dt_float = float(self, dt_c);
        let dt_sum = self.call("torch.sum", &[dt_float, one]);
        let dt_sum = self.unsqueeze(dt_sum, minus_one);
        let total = self.mul(i.a, dt_sum);
        let (mut h, ends) = self.entering(&decays, &inputs, total, 4, LEVELS_BELOW);

        // The steps again from each chunk's entering state, read out as they go.
        let mut outputs = Vec::with_capacity(self.steps.len());
        for j in 0..self.steps.len() {
            let kept = self.mul(decays[j], h);
            h = self.add(kept, inputs[j]);
            let read = self.mul(h, readouts[j]);
            outputs.push(self.call("torch.sum", &[read, minus_one]));
        }
        let outputs = self.p.pack(&outputs);
        let y = self.call("torch.stack", &[outputs, one]);
        let y = self.unchunked(y, length);
        let batch_first = self.p.pack(&[one, two, zero]);
        let y = self.call("torch.Tensor.permute", &[y, batch_first]);
        let dtype = self.p.getattr(i.hidden, "dtype");
        let mut y = self.call("torch.Tensor.to", &[y, dtype]);

        if let Some(d) = i.d {
            let d = self.unsqueeze(d, minus_one);
            let skip = self.mul(i.hidden, d);
            y = self.add(y, skip);
        }
        if let Some(z) = i.z {
            let gate = self.call("torch.nn.functional.silu", &[z]);
            y = self.mul(y, gate);
        }
        if i.last_state {
            let state = self.call("torch.Tensor.select", &[ends, zero, minus_one]);
            self.p.pack(&[y, state])
        } else {
            y
        }
    }
}
