//! `_vmap_expansion_sdpa(mask_function)` answers a function that broadcasts
//! instead of vmapping: no backend traces `torch.vmap`. The returned function
//! is a callback into this plugin, which expands the mask function over
//! (batch, head, q, kv) index grids with `_non_vmap_expansion_sdpa`.

use hfx_sdk::prelude::*;

const EXPANDED: &str = "broadcast-expansion";

#[hfx_sdk::patch(targets = ["transformers.masking_utils._vmap_expansion_sdpa"])]
fn patch_vmap_mask_expansion(call: PatchedCall) -> Result<Program> {
    let mut p = ProgramBuilder::new(&call);
    if call.target != EXPANDED {
        // The patched factory: hand back a callable that reaches `apply` again.
        let mask_function =
            call.param(0, "mask_function").ok_or_else(|| error("no mask_function", None))?;
        let expanded = p.callback(EXPANDED, &[mask_function]);
        return Ok(p.finish(expanded));
    }
    // The callback: (mask_function, batch, head, q, kv).
    let [mask_function, ref indices @ ..] = call.args[..] else {
        return Err(error(
            format!("expanded mask: expected 5 arguments, got {}", call.args.len()),
            None,
        ));
    };
    if indices.len() != 4 {
        return Err(error(
            format!("expanded mask: expected 4 index tensors, got {}", indices.len()),
            None,
        ));
    }
    let grids = p.call("transformers.masking_utils._non_vmap_expansion_sdpa", indices);
    let grids: Vec<Slot> = (0..4).map(|i| p.item(grids, i)).collect();
    let mask = p.invoke(mask_function, &grids, &[]);
    let mut sizes = vec![mask];
    for &index in indices {
        let shape = p.getattr(index, "shape");
        sizes.push(p.item(shape, 0));
    }
    let out = p.call("torch.Tensor.expand", &sizes);
    Ok(p.finish(out))
}
