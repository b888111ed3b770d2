//! SDPA rows masked at every key come out as zeros, as torch's fused kernels
//! give them. ONNX Runtime evaluates the softmax literally and returns NaN for
//! such a row when the mask is `-inf`, and a padded frame under a padding mask
//! is such a row. A boolean mask goes in as an additive one, and the
//! unattended rows are counted with a sum. Key, value and mask lengths are
//! checked equal, so a dynamic export gives them one symbol.

use hfx_sdk::prelude::*;

#[hfx_sdk::patch(targets = ["torch.nn.functional.scaled_dot_product_attention"])]
fn patch_sdpa_masked_rows(call: PatchedCall) -> Result<Program> {
    let (Some(query), Some(key), Some(value)) =
        (call.param(0, "query"), call.param(1, "key"), call.param(2, "value"))
    else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let Some(query_dtype) = call.tensor(query).map(|t| t.meta.dtype.clone()) else {
        return Ok(ProgramBuilder::passthrough(&call));
    };
    let mut p = ProgramBuilder::new(&call);
    let key_shape = p.getattr(key, "shape");
    let key_length = p.item(key_shape, -2);
    let value_shape = p.getattr(value, "shape");
    let value_length = p.item(value_shape, -2);
    let same = p.call("operator.eq", &[key_length, value_length]);
    p.call("torch._check", &[same]);

    let mask_slot = call.param(3, "attn_mask");
    let mask = match mask_slot.and_then(|s| call.tensor(s)) {
        Some(mask) => mask,
        None => {
            let out = p.original(&call.args, &call.kwarg_slots());
            return Ok(p.finish(out));
        }
    };
    let mask_slot = mask_slot.expect("a mask tensor has a slot");
    // A mask width of 1 broadcasts; a data-dependent one cannot be compared.
    let width_checked = match mask.meta.shape.last() {
        Some(Dim::Fixed(1)) | None => false,
        Some(Dim::Symbolic(expr)) => !expr.starts_with('u'),
        Some(Dim::Fixed(_)) => true,
    };
    if width_checked {
        let mask_shape = p.getattr(mask_slot, "shape");
        let width = p.item(mask_shape, -1);
        let same = p.call("operator.eq", &[width, key_length]);
        p.call("torch._check", &[same]);
    }
    let dtype = p.dtype(&query_dtype);
    let (attended, additive) = if mask.meta.dtype == "bool" {
        let attended = p.call("torch.Tensor.to", &[mask_slot, dtype]);
        let (lowest, _) = float_limits(&query_dtype)
            .ok_or_else(|| error(format!("sdpa: query dtype {query_dtype}"), None))?;
        let blocked = p.call("torch.logical_not", &[mask_slot]);
        let blocked = p.call("torch.Tensor.to", &[blocked, dtype]);
        let lowest = p.float(lowest);
        (attended, p.call("torch.mul", &[blocked, lowest]))
    } else {
        let (lowest, _) = float_limits(&mask.meta.dtype)
            .ok_or_else(|| error(format!("sdpa: mask dtype {}", mask.meta.dtype), None))?;
        let lowest = p.float(lowest);
        let open = p.call("torch.gt", &[mask_slot, lowest]);
        (p.call("torch.Tensor.to", &[open, dtype]), mask_slot)
    };
    let last = p.int(-1);
    let yes = p.boolean(true);
    let attended = p.call_kw("torch.sum", &[attended, last], &[("keepdim", yes)]);
    let one = p.int(1);
    let unattended = p.call("torch.lt", &[attended, one]);
    let mut args = call.args.clone();
    let mut kwargs = call.kwarg_slots();
    match args.get_mut(3) {
        Some(slot) => *slot = additive,
        None => {
            kwargs.iter_mut().filter(|(k, _)| *k == "attn_mask").for_each(|(_, s)| *s = additive)
        }
    }
    let attention = p.original(&args, &kwargs);
    let empty = p.pack(&[]);
    let zero = p.call_kw("torch.zeros", &[empty], &[("dtype", dtype)]);
    let out = p.call("torch.where", &[unattended, zero, attention]);
    Ok(p.finish(out))
}
