//! `PhimoeRotaryEmbedding.forward` picks its cos/sin scale in Python: with a
//! scaled rope (Phi-3.5-MoE's LongRoPE), `long_mscale` if
//! `torch.max(position_ids) + 1` exceeds the pretraining length, else
//! `short_mscale`, after an `if seq_len` on the same tensor. Both read a
//! tensor's value, which torch.export cannot branch on
//! (`GuardOnDataDependentSymNode`), dynamic or static. Here the scale is a
//! `torch.where` on that comparison, so the graph picks it at run time.
//!
//! The rest is the forward as written: its frequencies are
//! `rope_init_fn(config)`'s, called without a length (LongRoPE's short
//! factors at every length), which is what `__init__` stored in
//! `original_inv_freq`; the `@dynamic_rope_update` wrapper's copy of the
//! long or short frequencies into `inv_freq` is not read by the forward and
//! is left out. A model with the default rope passes through: its `if` stops
//! at the rope type before reading the tensor.

use hfx_sdk::prelude::*;

const TARGET: &str = "transformers.models.phimoe.modeling_phimoe.PhimoeRotaryEmbedding.forward";

const SELF: usize = 0;
const X: usize = 1;
const POSITION_IDS: usize = 2;

#[hfx_sdk::patch(targets = ["transformers.models.phimoe.modeling_phimoe.PhimoeRotaryEmbedding.forward"])]
fn patch_phimoe_rope_scale(call: PatchedCall) -> Result<Program> {
    if call.target != TARGET {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    let missing = |name: &str| error(format!("{TARGET}: no `{name}` argument"), None);
    let module = call.param(SELF, "self").ok_or_else(|| missing("self"))?;
    let x = call.param(X, "x").ok_or_else(|| missing("x"))?;
    let positions =
        call.param(POSITION_IDS, "position_ids").ok_or_else(|| missing("position_ids"))?;
    if matches!(call.attribute(module, "rope_type"), Some(Scalar::Str(t)) if t == "default") {
        return Ok(ProgramBuilder::passthrough(&call));
    }
    if call.tensor(positions).is_none() {
        return Err(error(format!("{TARGET}: `position_ids` is not a tensor"), None));
    }

    let mut p = ProgramBuilder::new(&call);
    let config = p.getattr(module, "config");
    let params = p.getattr(config, "rope_parameters");
    let key = |p: &mut ProgramBuilder, name: &str| {
        let name = p.string(name);
        p.call("operator.getitem", &[params, name])
    };
    let pretrained = key(&mut p, "original_max_position_embeddings");
    let long_scale = key(&mut p, "long_mscale");
    let short_scale = key(&mut p, "short_mscale");

    // The scale, picked in the graph.
    let one = p.int(1);
    let last = p.call("torch.max", &[positions]);
    let length = p.call("torch.add", &[last, one]);
    let long = p.call("torch.gt", &[length, pretrained]);
    let float32 = p.dtype("float32");
    let long_scale = p.call_kw("torch.tensor", &[long_scale], &[("dtype", float32)]);
    let short_scale = p.call_kw("torch.tensor", &[short_scale], &[("dtype", float32)]);
    let scale = p.call("torch.where", &[long, long_scale, short_scale]);

    // freqs = position_ids[..., None].float() * inv_freq, as the forward computes them.
    let frequencies = p.getattr(module, "original_inv_freq");
    let frequencies = p.call("torch.Tensor.to", &[frequencies, float32]);
    let minus_one = p.int(-1);
    let positions = p.call("torch.unsqueeze", &[positions, minus_one]);
    let positions = p.call("torch.Tensor.float", &[positions]);
    let angles = p.call("torch.mul", &[positions, frequencies]);
    let both = p.pack(&[angles, angles]);
    let angles = p.call("torch.cat", &[both, minus_one]);
    let cos = p.call("torch.cos", &[angles]);
    let cos = p.call("torch.mul", &[cos, scale]);
    let sin = p.call("torch.sin", &[angles]);
    let sin = p.call("torch.mul", &[sin, scale]);
    let dtype = p.getattr(x, "dtype");
    let cos = p.call("torch.Tensor.to", &[cos, dtype]);
    let sin = p.call("torch.Tensor.to", &[sin, dtype]);
    let out = p.pack(&[cos, sin]);
    Ok(p.finish(out))
}
