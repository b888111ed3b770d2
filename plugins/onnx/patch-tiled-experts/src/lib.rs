//! The experts of a mixture of experts traced in the tiled form OpenVINO's
//! CPU plugin turns into `GatherMatmul`s, which compute only the experts each
//! token is routed to (`ConvertTiledMoeBlockTo3GatherMatmuls`): every token
//! repeated once per expert, one batched matmul per projection against the
//! stacked expert weights (gate and up apart), the experts' outputs scaled by
//! the dense routing weights (zero where a token is not routed) and summed
//! over the experts. The forms the experts implementations trace otherwise
//! (a sort and a grouped matmul, or a gather of each token's expert weights)
//! do not fuse, and OpenVINO runs them as they are written. This is the
//! reference's `_tiled_experts_forward`, but for one shape: the experts'
//! outputs and the routing weights meet as `(experts, 1, tokens, ...)`,
//! reached by reshapes that change the rank. OpenVINO's match anchors on
//! those two reshapes, and a reshape to the shape a value already has (the
//! reference's `(experts, tokens, hidden)` view) is one the ONNX optimizer
//! removes where the sizes are static. (At static sizes OpenVINO 2026.3's
//! CPU plugin takes the experts' elementwise ops into a snippet before its
//! match runs, so a static IR fuses only compiled with `SNIPPETS_MODE`
//! `DISABLE`; a dynamic one fuses as compiled by default.)
//!
//! The targets are the experts classes themselves, each `forward` that
//! `use_experts_implementation` installs, not the dispatch through
//! `ExpertsInterface.get_interface` the reference patches: a program answers
//! with values, and the function that dispatch returns for a module this
//! plugin leaves alone is not one the patch sandbox admits. They are the
//! classes of the one form OpenVINO 2026.3 fuses: the default gating
//! (`act_fn(gate) * up`) of concatenated gate and up projections stored
//! `(experts, out, in)`, without biases or a norm after each expert
//! (tests/python/experts_classes.py lists them from transformers). Tiled,
//! any other form runs every expert on every token unfused; and a class
//! overriding `_apply_gate` (GPT-OSS, DeepSeek-V4 and eight more) gates
//! with a private method no program may call.
//!
//! A call this plugin does not recognise (a module whose decorator flags are
//! not that form, inputs that are not the `(tokens, hidden)` states and
//! `(tokens, top_k)` routing) runs as it was.

use hfx_sdk::prelude::*;

const SELF: usize = 0;
const HIDDEN_STATES: usize = 1;
const TOP_K_INDEX: usize = 2;
const TOP_K_WEIGHTS: usize = 3;

/// The decorator's flags of the form OpenVINO fuses.
const FUSED_FORM: &[(&str, bool)] = &[
    ("has_gate", true),
    ("is_concatenated", true),
    ("is_transposed", false),
    ("has_bias", false),
    ("has_post_expert_norm", false),
];

#[hfx_sdk::patch(targets = [
    "transformers.models.afmoe.modeling_afmoe.AfmoeExperts.forward",
    "transformers.models.axk1.modeling_axk1.AXK1Experts.forward",
    "transformers.models.axk2.modeling_axk2.AXK2Experts.forward",
    "transformers.models.bailing_hybrid.modeling_bailing_hybrid.BailingHybridExperts.forward",
    "transformers.models.cohere2_moe.modeling_cohere2_moe.Cohere2MoeExperts.forward",
    "transformers.models.deepseek_ocr2.modeling_deepseek_ocr2.DeepseekOcr2TextExperts.forward",
    "transformers.models.deepseek_v2.modeling_deepseek_v2.DeepseekV2Experts.forward",
    "transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Experts.forward",
    "transformers.models.deepseek_v32.modeling_deepseek_v32.DeepseekV32Experts.forward",
    "transformers.models.diffusion_gemma.modeling_diffusion_gemma.DiffusionGemmaTextExperts.forward",
    "transformers.models.dots1.modeling_dots1.Dots1Experts.forward",
    "transformers.models.dots3_note.modeling_dots3_note.Dots3NoteExperts.forward",
    "transformers.models.ernie4_5_moe.modeling_ernie4_5_moe.Ernie4_5_MoeExperts.forward",
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe.Ernie4_5_VLMoeMoeExperts.forward",
    "transformers.models.exaone_moe.modeling_exaone_moe.ExaoneMoeExperts.forward",
    "transformers.models.flex_olmo.modeling_flex_olmo.FlexOlmoExperts.forward",
    "transformers.models.flint.modeling_flint.FlintExperts.forward",
    "transformers.models.gemma4.modeling_gemma4.Gemma4TextExperts.forward",
    "transformers.models.glm4_moe.modeling_glm4_moe.Glm4MoeExperts.forward",
    "transformers.models.glm4_moe_lite.modeling_glm4_moe_lite.Glm4MoeLiteExperts.forward",
    "transformers.models.glm4v_moe.modeling_glm4v_moe.Glm4vMoeTextExperts.forward",
    "transformers.models.glm_moe_dsa.modeling_glm_moe_dsa.GlmMoeDsaExperts.forward",
    "transformers.models.granitemoe.modeling_granitemoe.GraniteMoeExperts.forward",
    "transformers.models.granitemoe_swa.modeling_granitemoe_swa.GraniteMoeSWAExperts.forward",
    "transformers.models.granitemoehybrid.modeling_granitemoehybrid.GraniteMoeHybridExperts.forward",
    "transformers.models.granitemoeshared.modeling_granitemoeshared.GraniteMoeSharedExperts.forward",
    "transformers.models.hunyuan_v1_moe.modeling_hunyuan_v1_moe.HunYuanMoEV1Experts.forward",
    "transformers.models.hy_v3.modeling_hy_v3.HYV3Experts.forward",
    "transformers.models.inkling.modeling_inkling.InklingExperts.forward",
    "transformers.models.jamba.modeling_jamba.JambaExperts.forward",
    "transformers.models.kimi_linear.modeling_kimi_linear.KimiLinearExperts.forward",
    "transformers.models.kolibri1.modeling_kolibri1.Kolibri1Experts.forward",
    "transformers.models.laguna.modeling_laguna.LagunaExperts.forward",
    "transformers.models.lara_mini.modeling_lara_mini.LaraMiniExperts.forward",
    "transformers.models.lfm2_moe.modeling_lfm2_moe.Lfm2MoeExperts.forward",
    "transformers.models.mellum.modeling_mellum.MellumExperts.forward",
    "transformers.models.mimo_v2_flash.modeling_mimo_v2_flash.MiMoV2FlashExperts.forward",
    "transformers.models.minimax.modeling_minimax.MiniMaxExperts.forward",
    "transformers.models.minimax_m2.modeling_minimax_m2.MiniMaxM2Experts.forward",
    "transformers.models.mistral4.modeling_mistral4.Mistral4Experts.forward",
    "transformers.models.mistral_large4.modeling_mistral_large4.MistralLarge4TextExperts.forward",
    "transformers.models.mixtral.modeling_mixtral.MixtralExperts.forward",
    "transformers.models.olmoe.modeling_olmoe.OlmoeExperts.forward",
    "transformers.models.phimoe.modeling_phimoe.PhimoeExperts.forward",
    "transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeExperts.forward",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeExperts.forward",
    "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeExperts.forward",
    "transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextExperts.forward",
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeThinkerTextExperts.forward",
    "transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe.Qwen3OmniMoeTalkerTextExperts.forward",
    "transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe.Qwen3VLMoeTextExperts.forward",
    "transformers.models.qwen4_exp.modeling_qwen4_exp.Qwen4ExpTextExperts.forward",
    "transformers.models.solar_open.modeling_solar_open.SolarOpenExperts.forward",
    "transformers.models.unlimited_ocr.modeling_unlimited_ocr.UnlimitedOcrTextExperts.forward",
    "transformers.models.zaya.modeling_zaya.ZayaExperts.forward",
])]
fn patch_tiled_experts(call: PatchedCall) -> Result<Program> {
    if !TARGETS.contains(&call.target.as_str()) {
        return Err(error(format!("unexpected target {}", call.target), None));
    }
    match Experts::of(&call) {
        Some(experts) => Ok(experts.tiled(&call)),
        None => Ok(ProgramBuilder::passthrough(&call)),
    }
}

/// The experts module and its inputs, when they are the fused form's.
struct Experts {
    module: Slot,
    hidden_states: Slot,
    top_k_index: Slot,
    top_k_weights: Slot,
    num_experts: i64,
}

impl Experts {
    fn of(call: &PatchedCall) -> Option<Experts> {
        let module = call.param(SELF, "self")?;
        let fused_form = FUSED_FORM.iter().all(|&(flag, value)| {
            matches!(call.attribute(module, flag), Some(Scalar::Boolean(b)) if *b == value)
        });
        let num_experts = match call.attribute(module, "num_experts") {
            Some(Scalar::Int(n)) if *n > 0 && fused_form => *n,
            _ => return None,
        };
        let tensor = |index: usize, name: &str| {
            let slot = call.param(index, name)?;
            (call.tensor(slot)?.rank() == 2).then_some(slot)
        };
        Some(Experts {
            module,
            hidden_states: tensor(HIDDEN_STATES, "hidden_states")?,
            top_k_index: tensor(TOP_K_INDEX, "top_k_index")?,
            top_k_weights: tensor(TOP_K_WEIGHTS, "top_k_weights")?,
            num_experts,
        })
    }

    /// The tiled forward: `(tokens, hidden)` in, `(tokens, hidden)` out.
    fn tiled(&self, call: &PatchedCall) -> Program {
        let mut p = ProgramBuilder::new(call);
        let m = self.module;
        let experts = p.int(self.num_experts);
        let (zero, one, two, last) = (p.int(0), p.int(1), p.int(2), p.int(-1));
        let tokens = p.size(self.hidden_states, 0);
        let hidden = p.size(self.hidden_states, 1);

        // Every token once per expert: (experts, tokens, hidden).
        let tiled = p.call("torch.Tensor.repeat", &[self.hidden_states, experts, one]);
        let tiled = p.call("torch.Tensor.view", &[tiled, experts, tokens, hidden]);

        // Each expert's weight `(out, in)`, through it: one batched matmul.
        let batched_linear = |p: &mut ProgramBuilder, input: Slot, weight: Slot| {
            let weight = p.call("torch.Tensor.transpose", &[weight, one, two]);
            p.call("torch.bmm", &[input, weight])
        };
        // The default gating, the gate and up halves projected apart.
        let gate_up = p.getattr(m, "gate_up_proj");
        let out_axis = p.int(-2);
        let halves = p.call_kw("torch.chunk", &[gate_up, two], &[("dim", out_axis)]);
        let (gate, up) = (p.item(halves, 0), p.item(halves, 1));
        let gate = batched_linear(&mut p, tiled, gate);
        let up = batched_linear(&mut p, tiled, up);
        let act = p.getattr(m, "act_fn");
        let gate = p.invoke(act, &[gate], &[]);
        let gated = p.call("torch.mul", &[gate, up]);
        let down = p.getattr(m, "down_proj");
        let out = batched_linear(&mut p, gated, down);
        let out = p.call("torch.Tensor.view", &[out, experts, one, tokens, hidden]);

        // The routing weights, dense: (tokens, experts), zero where a token
        // is not routed; then (experts, 1, tokens, 1) against the outputs.
        let dtype = p.getattr(self.hidden_states, "dtype");
        let device = p.getattr(self.hidden_states, "device");
        let routing =
            p.call_kw("torch.zeros", &[tokens, experts], &[("dtype", dtype), ("device", device)]);
        let weights = p.call("torch.Tensor.to", &[self.top_k_weights, dtype]);
        let routing = p.call("torch.Tensor.scatter", &[routing, one, self.top_k_index, weights]);
        let routing = p.call("torch.Tensor.transpose", &[routing, zero, one]);
        let routing = p.call("torch.Tensor.reshape", &[routing, experts, one, tokens]);
        let routing = p.call("torch.unsqueeze", &[routing, last]);
        let weighted = p.call("torch.mul", &[out, routing]);
        let summed = p.call_kw("torch.Tensor.sum", &[weighted], &[("dim", zero)]);
        let summed = p.call("torch.Tensor.view", &[summed, tokens, hidden]);
        p.finish(summed)
    }
}
