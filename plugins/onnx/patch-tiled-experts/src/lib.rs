//! Every `@use_experts_implementation` experts module with the default
//! gating traces in the tiled form OpenVINO's CPU plugin turns into
//! `GatherMatmul`s, which compute only the experts each token is routed to
//! (`ConvertTiledMoeBlockTo3GatherMatmuls`): every token repeated once per
//! expert, one batched matmul per projection against the stacked expert
//! weights (gate and up apart), the experts' outputs scaled by the dense
//! routing weights (zero where a token is not routed) and summed over the
//! experts. The forms the experts implementations trace otherwise (a sort
//! and a grouped matmul, or a gather of each token's expert weights) do not
//! fuse, and OpenVINO runs them as they are written. This is the reference's
//! `_tiled_experts_forward`, but for one shape: the experts' outputs and the
//! routing weights meet as `(experts, 1, tokens, ...)`, reached by reshapes
//! that change the rank. OpenVINO's match anchors on those two reshapes,
//! and a reshape to the shape a value already has (the reference's
//! `(experts, tokens, hidden)` view) is one the ONNX optimizer removes where
//! the sizes are static.
//!
//! The targets are the experts classes themselves, each `forward` that
//! `use_experts_implementation` installs, not the dispatch through
//! `ExpertsInterface.get_interface` the reference patches: a program answers
//! with values, and the function that dispatch returns for a module this
//! plugin leaves alone is not one the patch sandbox admits. Only the classes
//! whose gating is the default (`act_fn(gate) * up`, or `act_fn(up)` without
//! a gate) are targets: the others override `_apply_gate` (GPT-OSS,
//! DeepSeek-V4 and eight more in transformers 5.24), a private method no
//! program may call, and keep the form their configuration gives them.
//!
//! A call this plugin does not recognise (a module without the decorator's
//! flags, interleaved gate and up projections, inputs that are not the
//! `(tokens, hidden)` states and `(tokens, top_k)` routing) runs as it was.

use hfx_sdk::prelude::*;

const SELF: usize = 0;
const HIDDEN_STATES: usize = 1;
const TOP_K_INDEX: usize = 2;
const TOP_K_WEIGHTS: usize = 3;

#[hfx_sdk::patch(targets = [
    // transformers 5.24's `@use_experts_implementation` classes whose
    // `_apply_gate` is `_default_apply_gate` (tests/python/experts_classes.py).
    "transformers.models.afmoe.modeling_afmoe.AfmoeExperts.forward",
    "transformers.models.aria.modeling_aria.AriaExperts.forward",
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
    "transformers.models.muse_spark.modeling_muse_spark.MuseSparkExperts.forward",
    "transformers.models.nemotron_h.modeling_nemotron_h.NemotronHExperts.forward",
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

/// What the call says about the experts module and its inputs.
struct Experts {
    module: Slot,
    hidden_states: Slot,
    top_k_index: Slot,
    top_k_weights: Slot,
    num_experts: i64,
    has_gate: bool,
    has_bias: bool,
    has_post_expert_norm: bool,
    /// Weights stored `(experts, in, out)` rather than `(experts, out, in)`.
    is_transposed: bool,
}

impl Experts {
    fn of(call: &PatchedCall) -> Option<Experts> {
        let module = call.param(SELF, "self")?;
        let flag = |name: &str| match call.attribute(module, name) {
            Some(Scalar::Boolean(b)) => Some(*b),
            _ => None,
        };
        let num_experts = match call.attribute(module, "num_experts") {
            Some(Scalar::Int(n)) if *n > 0 => *n,
            _ => return None,
        };
        let has_gate = flag("has_gate")?;
        // Interleaved gate and up rows (`[gate0, up0, gate1, ...]`) are not
        // the default gating's halves.
        if has_gate && !flag("is_concatenated")? {
            return None;
        }
        let tensor = |index: usize, name: &str, rank: usize| {
            let slot = call.param(index, name)?;
            (call.tensor(slot)?.rank() == rank).then_some(slot)
        };
        Some(Experts {
            module,
            hidden_states: tensor(HIDDEN_STATES, "hidden_states", 2)?,
            top_k_index: tensor(TOP_K_INDEX, "top_k_index", 2)?,
            top_k_weights: tensor(TOP_K_WEIGHTS, "top_k_weights", 2)?,
            num_experts,
            has_gate,
            has_bias: flag("has_bias")?,
            has_post_expert_norm: flag("has_post_expert_norm")?,
            is_transposed: flag("is_transposed")?,
        })
    }

    /// The tiled forward: `(tokens, hidden)` in, `(tokens, hidden)` out.
    fn tiled(&self, call: &PatchedCall) -> Program {
        let mut p = ProgramBuilder::new(call);
        let m = self.module;
        let experts = p.int(self.num_experts);
        let one = p.int(1);
        let tokens = p.size(self.hidden_states, 0);
        let hidden = p.size(self.hidden_states, 1);

        // Every token once per expert: (experts, tokens, hidden).
        let tiled = p.call("torch.Tensor.repeat", &[self.hidden_states, experts, one]);
        let tiled = p.call("torch.Tensor.view", &[tiled, experts, tokens, hidden]);

        let act = p.getattr(m, "act_fn");
        let projected = if self.has_gate {
            let weight = p.getattr(m, "gate_up_proj");
            let two = p.int(2);
            let out_axis = p.int(if self.is_transposed { -1 } else { -2 });
            let halves = p.call_kw("torch.chunk", &[weight, two], &[("dim", out_axis)]);
            let (gate_weight, up_weight) = (p.item(halves, 0), p.item(halves, 1));
            let (gate_bias, up_bias) = if self.has_bias {
                let bias = p.getattr(m, "gate_up_proj_bias");
                let last = p.int(-1);
                let halves = p.call_kw("torch.chunk", &[bias, two], &[("dim", last)]);
                (Some(p.item(halves, 0)), Some(p.item(halves, 1)))
            } else {
                (None, None)
            };
            let gate = self.batched_linear(&mut p, tiled, gate_weight, gate_bias);
            let up = self.batched_linear(&mut p, tiled, up_weight, up_bias);
            let gate = p.invoke(act, &[gate], &[]);
            p.call("torch.mul", &[gate, up])
        } else {
            let weight = p.getattr(m, "up_proj");
            let bias = self.has_bias.then(|| p.getattr(m, "up_proj_bias"));
            let up = self.batched_linear(&mut p, tiled, weight, bias);
            p.invoke(act, &[up], &[])
        };
        let weight = p.getattr(m, "down_proj");
        let bias = self.has_bias.then(|| p.getattr(m, "down_proj_bias"));
        let out = self.batched_linear(&mut p, projected, weight, bias);
        let mut out = p.call("torch.Tensor.view", &[out, experts, one, tokens, hidden]);
        if self.has_post_expert_norm {
            let norm = p.getattr(m, "post_expert_norm");
            out = p.invoke(norm, &[out], &[]);
        }

        // The routing weights, dense: (tokens, experts), zero where a token
        // is not routed; then (experts, 1, tokens, 1) against the outputs.
        let dtype = p.getattr(self.hidden_states, "dtype");
        let device = p.getattr(self.hidden_states, "device");
        let routing =
            p.call_kw("torch.zeros", &[tokens, experts], &[("dtype", dtype), ("device", device)]);
        let weights = p.call("torch.Tensor.to", &[self.top_k_weights, dtype]);
        let routing =
            p.call("torch.Tensor.scatter", &[routing, one, self.top_k_index, weights]);
        let zero = p.int(0);
        let routing = p.call("torch.Tensor.transpose", &[routing, zero, one]);
        let routing = p.call("torch.Tensor.reshape", &[routing, experts, one, tokens]);
        let last = p.int(-1);
        let routing = p.call("torch.unsqueeze", &[routing, last]);
        let weighted = p.call("torch.mul", &[out, routing]);
        let summed = p.call_kw("torch.Tensor.sum", &[weighted], &[("dim", zero)]);
        let summed = p.call("torch.Tensor.view", &[summed, tokens, hidden]);
        p.finish(summed)
    }

    /// `(experts, tokens, in)` through each expert's weight: one batched
    /// matmul, the weight read as stored (`(experts, out, in)` transposed on
    /// the way), the bias per expert broadcast over the tokens.
    fn batched_linear(
        &self,
        p: &mut ProgramBuilder,
        input: Slot,
        weight: Slot,
        bias: Option<Slot>,
    ) -> Slot {
        let weight = if self.is_transposed {
            weight
        } else {
            let (rows, cols) = (p.int(1), p.int(2));
            p.call("torch.Tensor.transpose", &[weight, rows, cols])
        };
        let out = p.call("torch.bmm", &[input, weight]);
        match bias {
            Some(bias) => {
                let tokens_axis = p.int(1);
                let bias = p.call("torch.unsqueeze", &[bias, tokens_axis]);
                p.call("torch.add", &[out, bias])
            }
            None => out,
        }
    }
}
