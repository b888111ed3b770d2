//! Mamba2's chunked scan (`mamba2_chunk_scan`) pads the sequence to a
//! multiple of its chunk by `(chunk - L % chunk) % chunk` and cuts the padding
//! off only `if pad_size > 0`: torch.export takes the branch of the traced
//! length and guards the length's residue, so a dynamic export is valid at
//! that residue only. Here the scan receives a sequence already padded to a
//! whole number of chunks, so its own padding is 0 at every length, and the
//! output is narrowed back to the length.
//!
//! The padded steps are neutral: dt is computed first (bias, softplus, limit,
//! as the scan would) and padded with 0, then the scan runs with no bias, no
//! softplus and no limit. A step with dt 0 neither decays the state (exp(A·0)
//! is 1) nor adds to it (its input is scaled by dt), so the final state is the
//! unpadded one; the scan is causal, so positions before the padding are
//! unchanged.
//!
//! The padded length is `chunk * (ceil(L / chunk) + 1)`, always at least one
//! position longer than L. Written as a multiple of the chunk, torch's
//! symbolic algebra proves the scan's own residue 0 (as `L + (chunk - L %
//! chunk) % chunk` it cannot). Without the extra chunk, a traced length that
//! is a multiple of the chunk pads by 0, and the narrow back to L is then a
//! no-op torch.export guards as `padded == L` (the residue guard again); a
//! trace of one chunk, the usual prompt with a chunk of 256, would guard the
//! chunk count to 1, and a trace of two to more than one (lengths up to a
//! chunk refused). The cost is one chunk of zeros through the scan.
//!
//! The same function, verbatim, is copied into Bamba, Falcon-H1,
//! GraniteMoeHybrid, Nemotron-H and Zamba2; each copy is its own target.

use hfx_sdk::prelude::*;

// The scan's parameters by position (the `TARGETS` the macro declares share
// one signature).
const HIDDEN_STATES: usize = 0;
const DT: usize = 1;
const B: usize = 3;
const C: usize = 4;
const CHUNK_SIZE: usize = 5;
const DT_BIAS: usize = 7;
const DT_SOFTPLUS: usize = 9;
const DT_LIMIT: usize = 10;
const RETURN_FINAL_STATES: usize = 11;

#[hfx_sdk::patch(targets = [
    "transformers.models.mamba2.modeling_mamba2.mamba2_chunk_scan",
    "transformers.models.bamba.modeling_bamba.mamba2_chunk_scan",
    "transformers.models.falcon_h1.modeling_falcon_h1.mamba2_chunk_scan",
    "transformers.models.granitemoehybrid.modeling_granitemoehybrid.mamba2_chunk_scan",
    "transformers.models.nemotron_h.modeling_nemotron_h.mamba2_chunk_scan",
    "transformers.models.zamba2.modeling_zamba2.mamba2_chunk_scan",
])]
fn patch_mamba2_chunk_padding(call: PatchedCall) -> Result<Program> {
    if !TARGETS.contains(&call.target.as_str()) {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    let target = call.target.clone();
    let missing = |name: &str| error(format!("{target}: no `{name}` argument"), None);
    let hidden =
        call.param(HIDDEN_STATES, "hidden_states").ok_or_else(|| missing("hidden_states"))?;
    let dt = call.param(DT, "dt").ok_or_else(|| missing("dt"))?;
    let b = call.param(B, "B").ok_or_else(|| missing("B"))?;
    let c = call.param(C, "C").ok_or_else(|| missing("C"))?;
    let chunk = call.param(CHUNK_SIZE, "chunk_size").ok_or_else(|| missing("chunk_size"))?;
    let flag = |index: usize, name: &str| match call.param(index, name) {
        None => Ok(false),
        Some(slot) => call
            .boolean(slot)
            .ok_or_else(|| error(format!("{target}: `{name}` is not a plain bool"), None)),
    };
    let softplus = flag(DT_SOFTPLUS, "dt_softplus")?;
    let final_states = flag(RETURN_FINAL_STATES, "return_final_states")?;

    // A fixed length has a fixed padding: the scan's own branch is then exact.
    let Some(hidden_meta) = call.tensor(hidden) else {
        return Err(error(format!("{target}: `hidden_states` is not a tensor"), None));
    };
    if !hidden_meta.symbolic_dim(1) {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    let rank = |slot: Slot, name: &str| {
        call.tensor(slot)
            .map(|t| t.rank())
            .ok_or_else(|| error(format!("{target}: `{name}` is not a tensor"), None))
    };
    let ranks = [rank(hidden, "hidden_states")?, rank(dt, "dt")?, rank(b, "B")?, rank(c, "C")?];

    let mut p = ProgramBuilder::new(&call);
    let (zero, one) = (p.int(0), p.int(1));

    // dt as the scan computes it, before padding.
    let mut dt_now = dt;
    if let Some(bias) = call.param(DT_BIAS, "dt_bias").filter(|&s| !call.is_none(Some(s))) {
        let dtype = p.getattr(dt_now, "dtype");
        let bias = p.call("torch.Tensor.to", &[bias, dtype]);
        dt_now = p.call("torch.add", &[dt_now, bias]);
    }
    if softplus {
        dt_now = p.call("torch.nn.functional.softplus", &[dt_now]);
    }
    let inf = p.lookup("math.inf");
    let (low, high) = match call.param(DT_LIMIT, "dt_limit") {
        Some(limit) => (p.item(limit, 0), p.item(limit, 1)),
        None => (p.float(0.0), inf),
    };
    dt_now = p.call("torch.clamp", &[dt_now, low, high]);

    // The padded length, a multiple of the chunk with at least one chunk of padding.
    let length = p.size(hidden, 1);
    let chunk_less_one = p.call("operator.sub", &[chunk, one]);
    let rounded_up = p.call("operator.add", &[length, chunk_less_one]);
    let chunks = p.call("operator.floordiv", &[rounded_up, chunk]);
    let chunks = p.call("operator.add", &[chunks, one]);
    let padded = p.call("operator.mul", &[chunk, chunks]);
    let pad = p.call("operator.sub", &[padded, length]);
    let fill = p.float(0.0);
    let pad_axis1 = |p: &mut ProgramBuilder, tensor: Slot, rank: usize| {
        // constant_pad_nd's pairs run from the last axis: (0, 0) for each axis
        // after the sequence, then (0, pad) for it.
        let mut amounts = vec![zero; 2 * (rank - 2)];
        amounts.extend([zero, pad]);
        let amounts = p.pack(&amounts);
        p.call("torch.constant_pad_nd", &[tensor, amounts, fill])
    };
    let hidden_padded = pad_axis1(&mut p, hidden, ranks[0]);
    let dt_padded = pad_axis1(&mut p, dt_now, ranks[1]);
    let b_padded = pad_axis1(&mut p, b, ranks[2]);
    let c_padded = pad_axis1(&mut p, c, ranks[3]);

    // The call as made, with the padded tensors and dt taken as final.
    let no_bias = p.none();
    let no_softplus = p.boolean(false);
    let minus_inf = p.call("operator.neg", &[inf]);
    let no_limit = p.pack(&[minus_inf, inf]);
    let replacements = [
        (HIDDEN_STATES, "hidden_states", hidden_padded),
        (DT, "dt", dt_padded),
        (B, "B", b_padded),
        (C, "C", c_padded),
        (DT_BIAS, "dt_bias", no_bias),
        (DT_SOFTPLUS, "dt_softplus", no_softplus),
        (DT_LIMIT, "dt_limit", no_limit),
    ];
    let mut args = call.args.clone();
    for &(index, _, slot) in &replacements {
        if let Some(arg) = args.get_mut(index) {
            *arg = slot;
        }
    }
    let mut kwargs = call.kwarg_slots();
    for &(index, name, slot) in &replacements {
        if index < args.len() {
            continue;
        }
        match kwargs.iter_mut().find(|(k, _)| *k == name) {
            Some(kwarg) => kwarg.1 = slot,
            None => kwargs.push((name, slot)),
        }
    }
    let out = p.original(&args, &kwargs);

    let out = if final_states {
        let (output, state) = (p.item(out, 0), p.item(out, 1));
        let output = p.narrow(output, one, zero, length);
        p.pack(&[output, state])
    } else {
        p.narrow(out, one, zero, length)
    };
    Ok(p.finish(out))
}
