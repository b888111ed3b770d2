//! `NllbMoeTop2Router._cast_classifier` casts the classifier's dtype inside
//! forward, which does not trace; the model is exported in one dtype anyway.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = [
    "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router._cast_classifier",
])]
fn patch_nllb_moe_classifier_cast(call: PatchedCall) -> Result<Program> {
    let mut p = ProgramBuilder::new(&call);
    let nothing = p.none();
    Ok(p.finish(nothing))
}
