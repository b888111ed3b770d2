//! Vision and audio encoders that pack several images (frames, audio
//! chunks) into one sequence attend within each one: their attention's
//! forward splits queries, keys and values by `cu_seqlens` (`torch.split(x,
//! lengths.tolist())`) and runs the attention once per segment. torch.export
//! cannot trace that loop: each segment's length is read from a tensor, and
//! the attention branches on it (`q_length > 1` in `sdpa_attention_forward`,
//! a guard on a data-dependent value).
//!
//! Here the forward itself is kept and its segmentation changed: it is
//! called with one segment spanning the sequence (`cu_seqlens`'s first and
//! last entries) and a block-diagonal additive mask as `position_bias`, which
//! transformers' attention interface adds to the scores (sdpa and flex take
//! it; the encoders' own `eager_attention_forward` does not, so it is a
//! target too, adding the bias to its `attention_mask`). The mask is built
//! from `cu_seqlens`: a position's segment is the number of boundaries at or
//! before it, and two positions attend to each other when their segments are
//! equal. The forward's split into that one segment is answered with the
//! whole tensor (`torch.split` is a target, answering a split into one
//! section of a symbolic length and passing every other through). So every
//! encoder's own projections, norms, rotary embedding, grouped heads, layout
//! and return convention run as written, and one program serves all 29
//! classes, which share the split-and-loop and differ in everything around it.
//!
//! Why this and not the reference's patch, a forward rewritten to reshape the
//! sequence into a batch of equal segments (one attention call, a batch row
//! per segment):
//! - Exact for any segments. The reference needs every segment the same
//!   length (a runtime check); images of different sizes fail it, and so do
//!   Qwen2.5-VL's windows, cut at each image's edge. Here the number of
//!   segments may vary too: `cu_seqlens`'s length is an axis like any other.
//! - No layout branches: the reference's forward re-implements the classes'
//!   layouts (fused `qkv` or separate projections, grouped heads, qk norms,
//!   rotary conventions, NaViT's `(1, T, D)`, tuple returns) and must follow
//!   every change to them; here the model's code runs.
//! - The cost is memory: one attention over the whole sequence holds
//!   `heads x T x T` scores and a `T x T` mask, where the reference holds
//!   `heads x T x T / segments` (equal segments). Four images of 1024
//!   patches and 16 heads: 1 GiB of float32 scores a layer against 256 MiB.
//!   The masked scores cost compute as well; a runtime whose fused attention
//!   skips masked blocks recovers it, the math path does not.
//!
//! The traced program keeps nothing of the loop: the one segment's length the
//! forward reads back is used by nothing once the split is answered, and
//! torch.export drops it (the subtraction before it stays, unused, until the
//! ONNX stages remove dead nodes). The eager targets answer only a call carrying
//! `position_bias` (these forwards'); any other call, a text decoder's in the
//! same module, runs as it was. Inkling2's `eager_attention_forward` adds
//! `position_bias` itself and is not a target.
//!
//! Not served: flash attention. A forward configured for it takes its other
//! branch, varlen attention over `cu_seqlens`, which the one segment would
//! make attention over the whole sequence. The worker sets sdpa on the
//! transformers model it traces (`set_attn_implementation("sdpa")`), so only
//! a module that is no such model, wrapping one configured for flash on a
//! GPU, would reach it; `--verify` then fails against eager.

use hfx_sdk::prelude::*;

// The forwards' parameters by position: every target forward takes
// `(self, hidden_states, cu_seqlens, ...)`.
const HIDDEN_STATES: usize = 1;
const CU_SEQLENS: usize = 2;
// `eager_attention_forward(module, query, key, value, attention_mask, ...)`.
const ATTENTION_MASK: usize = 4;

#[hfx_sdk::patch(targets = [
    // The reference's registrations (`_patch_chunked_vision_attention`).
    "transformers.models.cohere_compass.modeling_cohere_compass.CohereCompassVisionAttention.forward",
    "transformers.models.dots3_note.modeling_dots3_note.Dots3NoteVisionAttention.forward",
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeVisionAttention.forward",
    "transformers.models.exaone4_5.modeling_exaone4_5.Exaone4_5_VisionAttention.forward",
    "transformers.models.glm4v.modeling_glm4v.Glm4vVisionAttention.forward",
    "transformers.models.glm4v_moe.modeling_glm4v_moe.Glm4vMoeVisionAttention.forward",
    "transformers.models.glm_ocr.modeling_glm_ocr.GlmOcrVisionAttention.forward",
    "transformers.models.inkling2.modeling_inkling2.Inkling2VisionAttention.forward",
    "transformers.models.kimi_k25.modeling_kimi_k25.Kimi_K25VisionAttention.forward",
    "transformers.models.lfm3_vl.modeling_lfm3_vl.Lfm3VlVisionAttention.forward",
    "transformers.models.minicpm_ocr.modeling_minicpm_ocr.MiniCPMOcrVisionAttention.forward",
    "transformers.models.minicpmv4_6.modeling_minicpmv4_6.MiniCPMV4_6VisionAttention.forward",
    "transformers.models.minicpmv4_7.modeling_minicpmv4_7.MiniCPMV4_7VisionAttention.forward",
    "transformers.models.minimax_m3_vl.modeling_minimax_m3_vl.MiniMaxM3VLVisionAttention.forward",
    "transformers.models.muse_glimmer.modeling_muse_glimmer.MuseGlimmerVisionAttention.forward",
    "transformers.models.muse_spark.modeling_muse_spark.MuseSparkVisionAttention.forward",
    "transformers.models.paddleocr_vl.modeling_paddleocr_vl.PaddleOCRVisionAttention.forward",
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.Qwen2_5OmniAudioAttention.forward",
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.Qwen2_5OmniVisionAttention.forward",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl.Qwen2_5_VLVisionAttention.forward",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.VisionAttention.forward",
    "transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5VisionAttention.forward",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeVisionAttention.forward",
    "transformers.models.qwen3_asr.modeling_qwen3_asr.Qwen3ASRAudioAttention.forward",
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeAudioAttention.forward",
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeVisionAttention.forward",
    "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLVisionAttention.forward",
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeVisionAttention.forward",
    "transformers.models.video_llama_3.modeling_video_llama_3.VideoLlama3VisionAttention.forward",
    // The split by segment lengths those forwards make, here into one segment.
    "torch.split",
    // The eager attention those forwards call (all but Inkling2's).
    "transformers.models.cohere_compass.modeling_cohere_compass.eager_attention_forward",
    "transformers.models.dots3_note.modeling_dots3_note.eager_attention_forward",
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe.eager_attention_forward",
    "transformers.models.exaone4_5.modeling_exaone4_5.eager_attention_forward",
    "transformers.models.glm4v.modeling_glm4v.eager_attention_forward",
    "transformers.models.glm4v_moe.modeling_glm4v_moe.eager_attention_forward",
    "transformers.models.glm_ocr.modeling_glm_ocr.eager_attention_forward",
    "transformers.models.kimi_k25.modeling_kimi_k25.eager_attention_forward",
    "transformers.models.lfm3_vl.modeling_lfm3_vl.eager_attention_forward",
    "transformers.models.minicpm_ocr.modeling_minicpm_ocr.eager_attention_forward",
    "transformers.models.minicpmv4_6.modeling_minicpmv4_6.eager_attention_forward",
    "transformers.models.minicpmv4_7.modeling_minicpmv4_7.eager_attention_forward",
    "transformers.models.minimax_m3_vl.modeling_minimax_m3_vl.eager_attention_forward",
    "transformers.models.muse_glimmer.modeling_muse_glimmer.eager_attention_forward",
    "transformers.models.muse_spark.modeling_muse_spark.eager_attention_forward",
    "transformers.models.paddleocr_vl.modeling_paddleocr_vl.eager_attention_forward",
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.eager_attention_forward",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl.eager_attention_forward",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.eager_attention_forward",
    "transformers.models.qwen3_5.modeling_qwen3_5.eager_attention_forward",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.eager_attention_forward",
    "transformers.models.qwen3_asr.modeling_qwen3_asr.eager_attention_forward",
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.eager_attention_forward",
    "transformers.models.qwen3_vl.modeling_qwen3_vl.eager_attention_forward",
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.eager_attention_forward",
    "transformers.models.video_llama_3.modeling_video_llama_3.eager_attention_forward",
])]
fn patch_packed_segment_attention(call: PatchedCall) -> Result<Program> {
    if !TARGETS.contains(&call.target.as_str()) {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    if call.target == "torch.split" {
        one_section(&call)
    } else if call.target.ends_with(".eager_attention_forward") {
        eager_with_bias(&call)
    } else {
        one_masked_segment(&call)
    }
}

/// The forward over one segment of the whole sequence, its segments kept
/// apart by a block-diagonal `position_bias`.
fn one_masked_segment(call: &PatchedCall) -> Result<Program> {
    let target = &call.target;
    let missing = |name: &str| error(format!("{target}: no `{name}` argument"), None);
    let hidden =
        call.param(HIDDEN_STATES, "hidden_states").ok_or_else(|| missing("hidden_states"))?;
    let cu_seqlens = call.param(CU_SEQLENS, "cu_seqlens").ok_or_else(|| missing("cu_seqlens"))?;
    // `(T, D)`, or NaViT's `(1, T, D)`: the sequence is the axis before the features.
    if !call.tensor(hidden).is_some_and(|t| t.rank() >= 2) {
        return Err(error(
            format!("{target}: `hidden_states` is not a tensor of rank 2 or more"),
            None,
        ));
    }
    if !call.tensor(cu_seqlens).is_some_and(|t| t.rank() == 1) {
        return Err(error(format!("{target}: `cu_seqlens` is not a 1-D tensor"), None));
    }

    let mut p = ProgramBuilder::new(call);
    let (zero, one) = (p.int(0), p.int(1));
    let length = p.size(hidden, -2);

    // Each position's segment: the boundaries at or before it (`cu_seqlens[0]`
    // is 0, so every position counts it). Compared with the whole of
    // `cu_seqlens`, not `cu_seqlens[1:]`: a slice's contiguity check guards
    // its length (at least 2 where two images were traced), which would
    // refuse a single image.
    let index_dtype = p.getattr(cu_seqlens, "dtype");
    let device = p.getattr(cu_seqlens, "device");
    let positions =
        p.call_kw("torch.arange", &[length], &[("dtype", index_dtype), ("device", device)]);
    let positions = p.call("torch.Tensor.unsqueeze", &[positions, one]);
    let passed = p.call("torch.ge", &[positions, cu_seqlens]);
    let segment = p.call("torch.Tensor.sum", &[passed, one]);
    let rows = p.call("torch.Tensor.unsqueeze", &[segment, one]);
    let columns = p.call("torch.Tensor.unsqueeze", &[segment, zero]);
    let same = p.call("torch.eq", &[rows, columns]);

    // Additive, in the states' dtype, `(1, 1, T, T)`: sdpa adds it as its
    // mask (or to an `attention_mask` the caller passed), flex indexes it by
    // batch and head.
    let open = p.float(0.0);
    let inf = p.lookup("math.inf");
    let closed = p.call("operator.neg", &[inf]);
    let bias = p.call("torch.where", &[same, open, closed]);
    let dtype = p.getattr(hidden, "dtype");
    let bias = p.call("torch.Tensor.to", &[bias, dtype]);
    let bias = p.call("torch.Tensor.unsqueeze", &[bias, zero]);
    let mut bias = p.call("torch.Tensor.unsqueeze", &[bias, zero]);
    if let Some(given) = call.kwarg("position_bias").filter(|&s| !call.is_none(Some(s))) {
        bias = p.call("torch.add", &[given, bias]);
    }

    // One segment: from the first boundary to the last.
    let first = p.item(cu_seqlens, 0);
    let last = p.item(cu_seqlens, -1);
    let ends = p.pack(&[first, last]);
    let whole = p.call("torch.stack", &[ends]);

    let mut args = call.args.clone();
    let mut kwargs = call.kwarg_slots();
    match args.get_mut(CU_SEQLENS) {
        Some(arg) => *arg = whole,
        None => set_kwarg(&mut kwargs, "cu_seqlens", whole),
    }
    set_kwarg(&mut kwargs, "position_bias", bias);
    let out = p.original(&args, &kwargs);
    Ok(p.finish(out))
}

/// `torch.split(x, [length], dim)` with a symbolic `length`: `(x,)`. One
/// section is the whole axis (torch checks that it is), and a length read
/// back from a tensor (`lengths.tolist()`) is one torch.export cannot always
/// prove equal to the axis: it adds the check as a runtime assertion but,
/// where the axis' size is a compound expression (Qwen2.5-VL's windows put
/// the patches in another order by an index of its own length), keeps the
/// length a new symbol, and the attention then guards on it. Any other split
/// runs as it was.
fn one_section(call: &PatchedCall) -> Result<Program> {
    let tensor = call.param(0, "tensor");
    let sections = call.param(1, "split_size_or_sections");
    let one_symbolic = match sections.and_then(|s| call.value(s)) {
        Some(CallValue::Sequence(items)) => {
            matches!(items.as_slice(), [only] if matches!(call.value(*only), Some(CallValue::SymInt(_))))
        }
        _ => false,
    };
    let (Some(tensor), true) = (tensor.filter(|&t| call.tensor(t).is_some()), one_symbolic) else {
        return Ok(ProgramBuilder::passthrough(call));
    };
    let mut p = ProgramBuilder::new(call);
    let out = p.pack(&[tensor]);
    Ok(p.finish(out))
}

/// An eager attention call carrying `position_bias`: the bias added to its
/// `attention_mask` (both additive), as sdpa adds it.
fn eager_with_bias(call: &PatchedCall) -> Result<Program> {
    let Some(bias) = call.kwarg("position_bias").filter(|&s| !call.is_none(Some(s))) else {
        return Ok(ProgramBuilder::passthrough(call));
    };
    let mut p = ProgramBuilder::new(call);
    let given = call.param(ATTENTION_MASK, "attention_mask");
    let mask = match given.filter(|&s| !call.is_none(Some(s))) {
        Some(mask) => p.call("torch.add", &[mask, bias]),
        None => bias,
    };
    let mut args = call.args.clone();
    let mut kwargs: Vec<(&str, Slot)> =
        call.kwarg_slots().into_iter().filter(|(k, _)| *k != "position_bias").collect();
    match args.get_mut(ATTENTION_MASK) {
        Some(arg) => *arg = mask,
        None => set_kwarg(&mut kwargs, "attention_mask", mask),
    }
    let out = p.original(&args, &kwargs);
    Ok(p.finish(out))
}

fn set_kwarg<'a>(kwargs: &mut Vec<(&'a str, Slot)>, name: &'a str, slot: Slot) {
    match kwargs.iter_mut().find(|(k, _)| *k == name) {
        Some(kwarg) => kwarg.1 = slot,
        None => kwargs.push((name, slot)),
    }
}
