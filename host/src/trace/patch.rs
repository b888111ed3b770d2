//! Patched calls and programs on the worker protocol, and the check every
//! program passes before the worker runs it.
//!
//! The worker executes what a patch plugin answers with the full power of
//! Python. This module's [`check_program`] is the first filter, on strings:
//! paths, attribute names, slots; it refuses early and cheaply, but a string
//! check over Python's object graph cannot be complete (modules re-export
//! modules). The decision is the worker's `Reach` policy, made on the object a
//! path resolves to and on every value a step produces.

use serde_json::{json, Value};

use crate::plugins::patching::{
    Callback, CallValue, Device, Dim, LiveTensor, ObjectValue, OpCall, PatchedCall, Program, Scalar, Step, SymValue, TensorMeta, ValueCall,
};

// ── Worker JSON → contract ──

fn scalar(v: &Value) -> Scalar {
    match v {
        Value::Null => Scalar::None,
        Value::Bool(b) => Scalar::Boolean(*b),
        Value::Number(n) if n.is_i64() => Scalar::Int(n.as_i64().unwrap_or(0)),
        Value::Number(n) => Scalar::Float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Scalar::Str(s.clone()),
        other => Scalar::Str(other.to_string()),
    }
}

fn slots(v: &Value) -> Vec<u32> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_u64().map(|x| x as u32)).collect()).unwrap_or_default()
}

fn named_slots(v: &Value) -> Vec<(String, u32)> {
    v.as_array()
        .map(|a| a.iter().filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_u64()? as u32))).collect())
        .unwrap_or_default()
}

fn tensor(body: &Value) -> LiveTensor {
    let shape = body["shape"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| match d.as_i64() {
                    Some(n) => Dim::Fixed(n),
                    None => Dim::Symbolic(d["symbolic"].as_str().unwrap_or("").into()),
                })
                .collect()
        })
        .unwrap_or_default();
    LiveTensor {
        meta: TensorMeta {
            dtype: body["dtype"].as_str().unwrap_or("").into(),
            shape,
            strides: vec![],
            device: Device { kind: body["device"].as_str().unwrap_or("cpu").into(), index: None },
        },
        contiguous: body["contiguous"].as_bool().unwrap_or(true),
        sizes: body["sizes"].as_array().map(|a| a.iter().map(|d| d.as_i64().unwrap_or(-1)).collect()).unwrap_or_default(),
    }
}

fn call_value(v: &Value) -> Result<CallValue, String> {
    let (kind, body) = v.as_object().and_then(|o| o.iter().next()).ok_or("empty value")?;
    Ok(match kind.as_str() {
        "scalar" => CallValue::Scalar(scalar(body)),
        "sequence" => CallValue::Sequence(slots(body)),
        "sym_int" => CallValue::SymInt(SymValue { expr: body["expr"].as_str().unwrap_or("").into(), hint: body["hint"].as_i64() }),
        "dtype" => CallValue::Dtype(body.as_str().unwrap_or("").into()),
        "object" => CallValue::Object(ObjectValue {
            type_name: body["type"].as_str().unwrap_or("").into(),
            attributes: body["attributes"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
                .unwrap_or_default(),
        }),
        "tensor" => CallValue::Tensor(tensor(body)),
        other => return Err(format!("unknown value kind `{other}`")),
    })
}

pub fn call_from_json(call: &Value) -> Result<PatchedCall, String> {
    let values = call.get("values").and_then(Value::as_array).ok_or("patch call without values")?;
    Ok(PatchedCall {
        target: call["target"].as_str().unwrap_or("").into(),
        values: values.iter().map(call_value).collect::<Result<_, _>>()?,
        args: slots(&call["args"]),
        kwargs: named_slots(&call["kwargs"]),
    })
}

// ── Contract → worker JSON ──

fn scalar_json(s: &Scalar) -> Value {
    match s {
        Scalar::None => Value::Null,
        Scalar::Boolean(b) => json!(b),
        Scalar::Int(i) => json!(i),
        Scalar::Float(f) => json!(f),
        Scalar::Str(s) => json!(s),
    }
}

fn kwargs_json(kwargs: &[(String, u32)]) -> Vec<Value> {
    kwargs.iter().map(|(k, v)| json!([k, v])).collect()
}

fn op_json(op: &OpCall) -> Value {
    json!({"op": op.op, "args": op.args, "kwargs": kwargs_json(&op.kwargs)})
}

pub fn program_to_json(program: &Program) -> Value {
    let steps: Vec<Value> = program
        .steps
        .iter()
        .map(|step| match step {
            Step::Call(op) => json!({"call": op_json(op)}),
            Step::Original(op) => json!({"original": op_json(op)}),
            Step::Invoke(ValueCall { callee, args, kwargs }) => json!({"invoke": {"callee": callee, "args": args, "kwargs": kwargs_json(kwargs)}}),
            Step::Getattr((slot, name)) => json!({"getattr": [slot, name]}),
            Step::Item((slot, index)) => json!({"item": [slot, index]}),
            Step::Constant(s) => json!({"constant": scalar_json(s)}),
            Step::Lookup(path) => json!({"lookup": path}),
            Step::Pack(slots) => json!({"pack": slots}),
            Step::Enter(slot) => json!({"enter": slot}),
            Step::Callback(Callback { target, captured }) => json!({"callback": {"target": target, "captured": captured}}),
        })
        .collect();
    json!({"steps": steps, "output": program.output})
}

// ── What a program may reach ──

/// Pure builtins a program may call (`builtins.int` also guards a symbolic int).
const BUILTINS: &[&str] = &["int", "float", "bool", "len", "min", "max", "abs", "range", "tuple", "list", "slice", "round", "sum", "divmod", "pow"];
/// Direct `torch.*` names that touch files, processes, global state or the compiler.
const TORCH_DENIED: &[&str] = &[
    "save", "load", "from_file", "hub", "utils", "jit", "package", "compile", "ops", "classes", "library", "serialization",
    "multiprocessing", "distributed", "backends", "cuda", "set_default_device", "set_default_dtype", "set_default_tensor_type",
    "manual_seed", "seed", "set_num_threads", "set_num_interop_threads", "use_deterministic_algorithms", "set_printoptions",
    "set_grad_enabled", "export", "onnx", "fx", "cpp", "overrides", "profiler", "testing", "storage", "UntypedStorage",
    "TypedStorage",
];
/// `torch.Tensor` methods that reach storage, hooks or autograd.
const TENSOR_DENIED: &[&str] =
    &["storage", "untyped_storage", "share_memory_", "set_", "record_stream", "register_hook", "register_post_accumulate_grad_hook", "backward", "pin_memory"];
/// Submodules of torch whose every public name is pure computation.
const TORCH_PURE_MODULES: &[&str] = &["torch.nn.functional", "torch.fft", "torch.linalg", "torch.special", "torch.return_types", "torch.nn.attention"];
/// Symbolic-shape predicates.
const SYMBOLIC: &[&str] = &["guard_or_false", "guard_or_true", "statically_known_true", "definitely_true", "definitely_false", "sym_eq"];
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
const IO_NAMES: &[&str] = &["save_pretrained", "from_pretrained", "push_to_hub", "to_json_file", "save", "load", "register_for_auto_class"];

fn reachable(path: &str) -> Result<(), String> {
    let path = path.strip_prefix("torch.ops.").unwrap_or(path);
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty() || p.starts_with("__") || IO_NAMES.contains(p)) {
        return Err(format!("`{path}` is not reachable from a patch program"));
    }
    let private = |p: &&str| p.starts_with('_');
    let ok = match parts.as_slice() {
        ["aten", _op, _overload] => true,
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
        ["transformers", "models", _model, module, ..] => module.starts_with("modeling_") && parts.len() > 4,
        ["transformers", ..] => TRANSFORMERS_MODULES.iter().any(|m| path.starts_with(&format!("{m}.")) && path.len() > m.len() + 1),
        _ => false,
    };
    if ok { Ok(()) } else { Err(format!("`{path}` is not reachable from a patch program")) }
}

/// Checks that every slot a step reads exists, every path is reachable and no
/// attribute is private. Runs before the worker sees the program.
pub fn check_program(call: &PatchedCall, program: &Program) -> Result<(), String> {
    let mut defined = call.values.len() as u32;
    let slot = |s: u32, defined: u32, step: usize| {
        if s < defined { Ok(()) } else { Err(format!("step {step} reads slot {s}, but only {defined} exist")) }
    };
    let all = |slots: &[u32], kwargs: &[(String, u32)], defined: u32, step: usize| -> Result<(), String> {
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
                    return Err(format!("step {i}: attribute `{name}` is not reachable from a patch program"));
                }
            }
            Step::Item((s, _)) | Step::Enter(s) => slot(*s, defined, i)?,
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
        ] {
            assert!(reachable(path).is_err(), "{path}");
        }
    }
}
