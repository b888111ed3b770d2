//! `NllbMoeTop2Router._cast_classifier` casts the classifier's dtype inside
//! forward, which does not trace; the model is exported in one dtype anyway.

use hfx_sdk::prelude::*;

struct ClassifierCast;

impl Guest for ClassifierCast {
    fn describe() -> Vec<String> {
        targets(&["transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router._cast_classifier"])
    }

    fn apply(call: PatchedCall) -> Result<Program, Error> {
        let mut p = ProgramBuilder::new(&call);
        let nothing = p.none();
        Ok(p.finish(nothing))
    }
}

hfx_sdk::register_patch!(ClassifierCast);
