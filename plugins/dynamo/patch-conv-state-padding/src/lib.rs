//! `LinearAttentionLayer.update_conv_state`, the cache of every model with a
//! causal convolution before its scan (Mamba, Mamba2, Bamba, Falcon-H1,
//! Jamba, LFM2, Qwen3-Next, ...), pads a prefill shorter than the kernel
//! with zeros on the left `if` it is shorter, then keeps the last `kernel`
//! positions as the conv state. torch.export takes the branch of the traced
//! length and raises the length's lower bound to the kernel; an ONNX model
//! keeps no bounds, so at a shorter prefill the state's slice is short and
//! its copy into the state fails (or, at length 1, broadcasts the one
//! position over the state).
//!
//! Here a prefill always gets `kernel - 1` zeros on the left before the
//! method sees it: at least `kernel` positions at every length, so its own
//! branch is not taken and the state is the last `kernel` positions of the
//! zero-padded sequence, as eager's. The method returns the padded sequence
//! for the convolution, as eager does for a short prefill; every caller that
//! passes the kernel size keeps the convolution's last `length` positions,
//! and leading zeros are what the causal convolution's own padding reads, so
//! the output is unchanged. A call with a state already (a decode step) pads
//! by 0; a call without a kernel size (the state is then as long as the first
//! prefill, never padded) and a cache that records its past pass through.

use hfx_sdk::prelude::*;

const TARGET: &str = "transformers.cache_utils.LinearAttentionLayer.update_conv_state";

const SELF: usize = 0;
const CONV_STATES: usize = 1;
const STATE_IDX: usize = 2;
const CONV_KERNEL_SIZE: usize = 3;

#[hfx_sdk::patch(targets = ["transformers.cache_utils.LinearAttentionLayer.update_conv_state"])]
fn patch_conv_state_padding(call: PatchedCall) -> Result<Program> {
    if call.target != TARGET {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    let missing = |name: &str| error(format!("{TARGET}: no `{name}` argument"), None);
    let layer = call.param(SELF, "self").ok_or_else(|| missing("self"))?;
    let states = call.param(CONV_STATES, "conv_states").ok_or_else(|| missing("conv_states"))?;
    let Some(meta) = call.tensor(states) else {
        return Err(error(format!("{TARGET}: `conv_states` is not a tensor"), None));
    };
    // A fixed length takes a fixed branch, exact at that length; without a
    // kernel size the state is as long as the first prefill, never padded;
    // a cache that records its past keeps whole prefills.
    let kernel = call.param(CONV_KERNEL_SIZE, "conv_kernel_size").and_then(|s| call.int(s));
    let records = matches!(call.attribute(layer, "record_past"), Some(Scalar::Boolean(true)));
    let (Some(kernel), true, false) = (kernel, meta.symbolic_dim(-1), records) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let state_idx = match call.param(STATE_IDX, "state_idx") {
        None => 0,
        Some(slot) => call
            .int(slot)
            .ok_or_else(|| error(format!("{TARGET}: `state_idx` is not a plain int"), None))?,
    };

    let mut p = ProgramBuilder::new(&call);
    // `kernel - 1` on a prefill, 0 once the layer holds a state: the flag is
    // the cache's own Python bool, read as the call runs.
    let started = p.getattr(layer, "has_previous_state");
    let started = p.item(started, state_idx);
    let prefill = p.call("operator.not_", &[started]);
    let most = p.int(kernel - 1);
    let pad = p.call("operator.mul", &[most, prefill]);
    let zero = p.int(0);
    let amounts = p.pack(&[pad, zero]);
    let fill = p.float(0.0);
    let padded = p.call("torch.constant_pad_nd", &[states, amounts, fill]);

    let mut args = call.args.clone();
    let mut kwargs = call.kwarg_slots();
    match args.get_mut(CONV_STATES) {
        Some(arg) => *arg = padded,
        None => {
            if let Some(kwarg) = kwargs.iter_mut().find(|(k, _)| *k == "conv_states") {
                kwarg.1 = padded;
            }
        }
    }
    let out = p.original(&args, &kwargs);
    Ok(p.finish(out))
}
