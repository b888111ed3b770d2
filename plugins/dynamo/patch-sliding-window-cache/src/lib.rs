//! `DynamicSlidingWindowLayer.{update, get_mask_sizes, get_seq_length}` traced
//! as `DynamicLayer`'s: a trace would bake the sliding layer's Python token
//! counter and its cut to the window into the graph, so the exported decode
//! breaks past the window. The sliding mask still applies the window.

use hfx_sdk::prelude::*;

const PREFIX: &str = "transformers.cache_utils.DynamicSlidingWindowLayer.";

#[hfx_sdk::patch(targets = [
    "transformers.cache_utils.DynamicSlidingWindowLayer.update",
    "transformers.cache_utils.DynamicSlidingWindowLayer.get_mask_sizes",
    "transformers.cache_utils.DynamicSlidingWindowLayer.get_seq_length",
])]
fn patch_sliding_window_cache(call: PatchedCall) -> Result<Program> {
    let method = call
        .target
        .strip_prefix(PREFIX)
        .ok_or_else(|| error(format!("unexpected target {}", call.target), None))?;
    let mut p = ProgramBuilder::new(&call);
    let kwargs = call.kwarg_slots();
    let out =
        p.call_kw(&format!("transformers.cache_utils.DynamicLayer.{method}"), &call.args, &kwargs);
    Ok(p.finish(out))
}
