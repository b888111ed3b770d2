//! Patched calls and programs on the worker protocol, and the check every
//! program passes before the worker runs it.
//!
//! The worker executes what a patch plugin answers with the full power of
//! Python. This module's [`check_program`] is the first filter, on strings:
//! paths, attribute names, slots; it refuses early and cheaply, but a string
//! check over Python's object graph cannot be complete (modules re-export
//! modules). The decision is the worker's `Reach` policy, made on the object a
//! path resolves to and on every value a step produces.

use super::protocol::{
    PatchCall, WireDim, WireOp, WireProgram, WireScalar, WireStep, WireTensor, WireValue,
};
use crate::plugins::patching::{
    CallValue, Callback, Device, Dim, LiveTensor, ObjectValue, OpCall, PatchedCall, Program, Step,
    SymValue, TensorMeta, ValueCall,
};

// ── Protocol → contract: a patched call as the plugin sees it ──

fn tensor(t: &WireTensor) -> LiveTensor {
    let shape = t
        .shape
        .iter()
        .map(|d| match d {
            WireDim::Fixed(n) => Dim::Fixed(*n),
            WireDim::Symbolic(s) => Dim::Symbolic(s.symbolic.clone()),
        })
        .collect();
    LiveTensor {
        meta: TensorMeta {
            dtype: t.dtype.clone(),
            shape,
            strides: vec![],
            device: Device { kind: t.device.clone(), index: None },
        },
        contiguous: t.contiguous,
        sizes: t.sizes.clone(),
    }
}

fn call_value(v: &WireValue) -> CallValue {
    match v {
        WireValue::Scalar(s) => CallValue::Scalar(s.0.clone()),
        WireValue::Sequence(slots) => CallValue::Sequence(slots.clone()),
        WireValue::SymInt(sym) => {
            CallValue::SymInt(SymValue { expr: sym.expr.clone(), hint: sym.hint })
        }
        WireValue::Dtype(dtype) => CallValue::Dtype(dtype.clone()),
        WireValue::Object(o) => CallValue::Object(ObjectValue {
            type_name: o.type_name.clone(),
            attributes: o.attributes.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect(),
        }),
        WireValue::Tensor(t) => CallValue::Tensor(tensor(t)),
    }
}

pub fn call_from_wire(call: &PatchCall) -> PatchedCall {
    PatchedCall {
        target: call.target.clone(),
        values: call.values.iter().map(call_value).collect(),
        args: call.args.clone(),
        kwargs: call.kwargs.clone(),
    }
}

// ── Contract → protocol: the plugin's program as the worker runs it ──

fn op(op: &OpCall) -> WireOp {
    WireOp { op: op.op.clone(), args: op.args.clone(), kwargs: op.kwargs.clone() }
}

pub fn program_to_wire(program: &Program) -> WireProgram {
    let steps = program
        .steps
        .iter()
        .map(|step| match step {
            Step::Call(o) => WireStep::Call(op(o)),
            Step::Original(o) => WireStep::Original(op(o)),
            Step::Invoke(ValueCall { callee, args, kwargs }) => {
                WireStep::Invoke { callee: *callee, args: args.clone(), kwargs: kwargs.clone() }
            }
            Step::Getattr((slot, name)) => WireStep::Getattr((*slot, name.clone())),
            Step::Item((slot, index)) => WireStep::Item((*slot, *index)),
            Step::Constant(s) => WireStep::Constant(WireScalar(s.clone())),
            Step::Lookup(path) => WireStep::Lookup(path.clone()),
            Step::Pack(slots) => WireStep::Pack(slots.clone()),
            Step::Enter(slot) => WireStep::Enter(*slot),
            Step::Callback(Callback { target, captured }) => {
                WireStep::Callback { target: target.clone(), captured: captured.clone() }
            }
        })
        .collect();
    WireProgram { steps, output: program.output }
}

// ── What a program may reach ──

/// Pure builtins a program may call (`builtins.int` also guards a symbolic int).
const BUILTINS: &[&str] = &[
    "int", "float", "bool", "len", "min", "max", "abs", "range", "tuple", "list", "slice", "round",
    "sum", "divmod", "pow",
];
/// Direct `torch.*` names that touch files, processes, global state or the compiler.
const TORCH_DENIED: &[&str] = &[
    "save",
    "load",
    "from_file",
    "hub",
    "utils",
    "jit",
    "package",
    "compile",
    "ops",
    "classes",
    "library",
    "serialization",
    "multiprocessing",
    "distributed",
    "backends",
    "cuda",
    "set_default_device",
    "set_default_dtype",
    "set_default_tensor_type",
    "manual_seed",
    "seed",
    "set_num_threads",
    "set_num_interop_threads",
    "use_deterministic_algorithms",
    "set_printoptions",
    "set_grad_enabled",
    "export",
    "onnx",
    "fx",
    "cpp",
    "overrides",
    "profiler",
    "testing",
    "storage",
    "UntypedStorage",
    "TypedStorage",
];
/// `torch.Tensor` methods that reach storage, hooks or autograd.
const TENSOR_DENIED: &[&str] = &[
    "storage",
    "untyped_storage",
    "share_memory_",
    "set_",
    "record_stream",
    "register_hook",
    "register_post_accumulate_grad_hook",
    "backward",
    "pin_memory",
];
/// Submodules of torch whose every public name is pure computation.
const TORCH_PURE_MODULES: &[&str] = &[
    "torch.nn.functional",
    "torch.fft",
    "torch.linalg",
    "torch.special",
    "torch.return_types",
    "torch.nn.attention",
];
/// Symbolic-shape predicates.
const SYMBOLIC: &[&str] = &[
    "guard_or_false",
    "guard_or_true",
    "statically_known_true",
    "definitely_true",
    "definitely_false",
    "sym_eq",
];
/// transformers modules holding modeling code.
const TRANSFORMERS_MODULES: &[&str] = &[
    "transformers.masking_utils",
    "transformers.cache_utils",
    "transformers.pytorch_utils",
    "transformers.activations",
    "transformers.modeling_rope_utils",
    "transformers.integrations.sdpa_attention",
];
/// Names that save, load or publish, wherever they appear.
const IO_NAMES: &[&str] = &[
    "save_pretrained",
    "from_pretrained",
    "push_to_hub",
    "to_json_file",
    "save",
    "load",
    "register_for_auto_class",
];

/// The worker's allowlist (`hfx_worker/allowlist.json`): its `private` map
/// names the only `_` paths a program may write, each reviewed there.
const ALLOWLIST: &str = include_str!("../../worker/hfx_worker/allowlist.json");

fn reviewed_private(path: &str) -> bool {
    static PRIVATE: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PRIVATE
        .get_or_init(|| {
            let list: serde_json::Value = serde_json::from_str(ALLOWLIST).unwrap_or_default();
            list.get("private")
                .and_then(|p| p.as_object())
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default()
        })
        .iter()
        .any(|p| p == path)
}

fn reachable(path: &str) -> Result<(), String> {
    let path = path.strip_prefix("torch.ops.").unwrap_or(path);
    let parts: Vec<&str> = path.split('.').collect();
    let dunder = |p: &&str| p.starts_with("__") || p.ends_with("__");
    if parts.iter().any(|p| p.is_empty() || dunder(p) || IO_NAMES.contains(p)) {
        return Err(format!("`{path}` is not reachable from a patch program"));
    }
    // ATen/prims overloads are a family (`aten._softmax.default`); elsewhere a `_` name only where the allowlist reviews it.
    let operator = matches!(parts.as_slice(), ["aten" | "prims", _, _]);
    if !operator && parts.iter().any(|p| p.starts_with('_')) && !reviewed_private(path) {
        return Err(format!(
            "`{path}` names a private (`_`) attribute the allowlist does not review"
        ));
    }
    let private = |p: &&str| p.starts_with('_');
    let ok = match parts.as_slice() {
        ["aten" | "prims", _op, _overload] => true,
        ["operator" | "math", name] => !private(name),
        ["builtins", name] => BUILTINS.contains(name),
        ["torch", "_check" | "_check_is_size"] => true,
        ["torch", name] => !private(name) && !TORCH_DENIED.contains(name),
        ["torch", "Tensor", name] => !TENSOR_DENIED.contains(name) && !private(name),
        ["torch", "fx", "experimental", "symbolic_shapes", name] => SYMBOLIC.contains(name),
        ["torch", ..] => {
            let module = TORCH_PURE_MODULES.iter().find(|m| path.starts_with(&format!("{m}.")));
            module.is_some() && !parts.iter().any(private)
        }
        ["transformers", "models", _model, module, ..] => {
            module.starts_with("modeling_") && parts.len() > 4
        }
        ["transformers", ..] => TRANSFORMERS_MODULES
            .iter()
            .any(|m| path.starts_with(&format!("{m}.")) && path.len() > m.len() + 1),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("`{path}` is not reachable from a patch program"))
    }
}

/// Checks that every slot a step reads exists, every path is reachable and no
/// attribute is private. Runs before the worker sees the program.
pub fn check_program(call: &PatchedCall, program: &Program) -> Result<(), String> {
    let mut defined = call.values.len() as u32;
    let slot = |s: u32, defined: u32, step: usize| {
        if s < defined {
            Ok(())
        } else {
            Err(format!("step {step} reads slot {s}, but only {defined} exist"))
        }
    };
    let all = |slots: &[u32],
               kwargs: &[(String, u32)],
               defined: u32,
               step: usize|
     -> Result<(), String> {
        slots.iter().chain(kwargs.iter().map(|(_, s)| s)).try_for_each(|&s| slot(s, defined, step))
    };
    for (i, step) in program.steps.iter().enumerate() {
        match step {
            Step::Call(op) => {
                reachable(&op.op).map_err(|e| format!("step {i}: {e}"))?;
                all(&op.args, &op.kwargs, defined, i)?;
            }
            Step::Original(op) => all(&op.args, &op.kwargs, defined, i)?,
            Step::Invoke(call) => {
                slot(call.callee, defined, i)?;
                all(&call.args, &call.kwargs, defined, i)?;
            }
            Step::Getattr((s, name)) => {
                slot(*s, defined, i)?;
                if name.starts_with('_') || IO_NAMES.contains(&name.as_str()) {
                    return Err(format!(
                        "step {i}: attribute `{name}` is not reachable from a patch program"
                    ));
                }
            }
            Step::Item((s, _)) | Step::Enter(s) => slot(*s, defined, i)?,
            // The worker's JSON has no infinities or NaN: serde would send
            // `null`, a silent `None`. Refused, with the way that works.
            Step::Constant(crate::plugins::patching::Scalar::Float(f)) if !f.is_finite() => {
                return Err(format!("step {i}: the constant {f} is not finite (the protocol carries finite floats only): look up `math.inf` or `math.nan` instead, negated with `operator.neg`"));
            }
            Step::Constant(_) => {}
            Step::Lookup(path) => reachable(path).map_err(|e| format!("step {i}: {e}"))?,
            Step::Pack(slots) => all(slots, &[], defined, i)?,
            Step::Callback(cb) => all(&cb.captured, &[], defined, i)?,
        }
        defined += 1;
    }
    slot(program.output, defined, program.steps.len())
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn computation_is_reachable_and_io_is_not() {
        for path in [
            "aten.where.self",
            "torch.ops.aten._scaled_dot_product_flash_attention.default",
            "torch.where",
            "torch.Tensor.narrow",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.nn.attention.SDPBackend.MATH",
            "torch._check",
            "operator.floordiv",
            "builtins.int",
            "torch.fx.experimental.symbolic_shapes.guard_or_false",
            "transformers.cache_utils.DynamicLayer.update",
            "transformers.masking_utils._non_vmap_expansion_sdpa",
            "transformers.models.llama.modeling_llama.apply_rotary_pos_emb",
        ] {
            assert!(reachable(path).is_ok(), "{path}");
        }
        for path in [
            "os.system",
            "builtins.open",
            "builtins.eval",
            "builtins.__import__",
            "torch.save",
            "torch.load",
            "torch.from_file",
            "torch.hub.load",
            "torch.utils.cpp_extension.load_inline",
            "torch.ops.load_library",
            "torch.Tensor.untyped_storage",
            "torch.Tensor.__reduce_ex__",
            "torch._C._set_sdp_use_flash",
            "subprocess.run",
            "transformers.utils.hub.cached_file",
            "transformers.models.llama.modeling_llama.LlamaForCausalLM.save_pretrained",
            "transformers.models.llama.configuration_llama.LlamaConfig",
            "transformers.modeling_utils",
            "transformers.models.rag.modeling_rag.RagPreTrainedModel.from_pretrained_question_encoder_generator.__func__",
            "transformers.masking_utils._preprocess_mask_arguments",
            "transformers.models.llama.modeling_llama.LlamaForCausalLM._from_config",
            "torch.nn.functional.relu.__builtins__",
        ] {
            assert!(reachable(path).is_err(), "{path}");
        }
    }
}
