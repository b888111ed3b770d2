"""Hostile patch programs against the worker's resolved-object policy.

    python check_reach.py SCRATCH_DIR

Each hostile program is run by the worker's own `sandbox.run_program`, as if the host's
static check had let it through: every one must be refused with a
`PermissionError` naming what it reached, and nothing may have run (no marker
file written, no global state changed). Then every path and target the
shipped plugins use must still resolve. Exits non-zero with one line per
failure.
"""

import os
import sys

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import sandbox  # noqa: E402
from hfx_worker.messages import PatchSpec  # noqa: E402

# The policy, as one worker session builds it.
POLICY = sandbox.Reach()

SCRATCH = sys.argv[1]
MARKER = os.path.join(SCRATCH, "escaped")
SHELL = f"touch {MARKER}"


def constant(value):
    return {"constant": value}


def lookup(path):
    return {"lookup": path}


def call(op, *args, **kwargs):
    return {"call": {"op": op, "args": list(args), "kwargs": [[k, v] for k, v in kwargs.items()]}}


def invoke(callee, *args):
    return {"invoke": {"callee": callee, "args": list(args), "kwargs": []}}


def getattr_(slot, name):
    return {"getattr": [slot, name]}


def item(slot, index):
    return {"item": [slot, index]}


def enter(slot):
    return {"enter": slot}


# The call's own values: slot 0 a tensor, slot 1 the model's layer.
GIVEN = [torch.randn(2, 3), torch.nn.Linear(3, 3)]


def given():
    return list(GIVEN)


G = 2  # first slot a program's steps define

# (what, steps): the last step's result is the program's output.
HOSTILE = [
    (
        "shell through a modeling module's torch",
        [
            lookup("transformers.models.llama.modeling_llama.torch.os.system"),
            constant(SHELL),
            invoke(G, G + 1),
        ],
    ),
    (
        "shell through modeling_auto's os",
        [
            lookup("transformers.models.auto.modeling_auto.os.system"),
            constant(SHELL),
            invoke(G, G + 1),
        ],
    ),
    (
        "shell called by path",
        [constant(SHELL), call("transformers.models.llama.modeling_llama.torch.os.system", G)],
    ),
    ("shell through torch's os", [constant(SHELL), call("torch.os.system", G)]),
    (
        "shell through a class's module globals",
        [lookup("transformers.models.llama.modeling_llama.LlamaModel.forward.__globals__")],
    ),
    (
        "subprocess",
        [constant(SHELL), call("transformers.models.llama.modeling_llama.torch.subprocess.run", G)],
    ),
    ("torch's file writer", [constant(MARKER), call("torch.PyTorchFileWriter", G)]),
    ("torch.save", [constant(MARKER), call("torch.save", 0, G)]),
    ("torch.serialization.save", [constant(MARKER), call("torch.serialization.save", 0, G)]),
    ("torch.load", [constant(MARKER), call("torch.load", G)]),
    ("torch.from_file", [constant(MARKER), call("torch.from_file", G)]),
    ("torch.set_rng_state", [call("torch.get_rng_state")]),
    ("torch.set_rng_state by lookup", [lookup("torch.set_rng_state")]),
    ("torch.import_ir_module", [lookup("torch.import_ir_module")]),
    ("torch.manual_seed", [constant(0), call("torch.manual_seed", G)]),
    ("torch.set_default_dtype", [lookup("torch.float64"), call("torch.set_default_dtype", G)]),
    ("torch.set_num_threads", [constant(1), call("torch.set_num_threads", G)]),
    ("torch.compile", [lookup("torch.compile")]),
    ("a module as a value", [lookup("torch.nn.functional.torch")]),
    ("a module reached through torch", [lookup("torch.os")]),
    ("torch.jit's eval", [lookup("torch.jit.annotations.eval")]),
    ("builtins.eval", [constant("1"), call("builtins.eval", G)]),
    ("builtins.exec", [constant("1"), call("builtins.exec", G)]),
    ("builtins.compile", [lookup("builtins.compile")]),
    ("builtins.open", [constant(MARKER), constant("w"), call("builtins.open", G, G + 1)]),
    ("builtins.__import__", [constant("os"), call("builtins.__import__", G)]),
    ("builtins.getattr", [lookup("builtins.getattr")]),
    ("a function's __builtins__", [lookup("torch.nn.functional.relu.__builtins__")]),
    (
        "eval from a function's __builtins__",
        [
            lookup("torch.nn.functional.relu.__builtins__"),
            constant("eval"),
            call("operator.getitem", G, G + 1),
        ],
    ),
    ("a class's __subclasses__", [lookup("torch.Tensor.__subclasses__")]),
    (
        "object's __subclasses__ via a modeling class",
        [lookup("transformers.models.llama.modeling_llama.LlamaModel.__base__.__subclasses__")],
    ),
    ("__class__ of a tensor", [getattr_(0, "__class__")]),
    ("a bound method of a tensor", [getattr_(0, "numpy")]),
    ("a layer's state_dict method", [getattr_(1, "state_dict")]),
    (
        "a model class's from_pretrained",
        [lookup("transformers.models.llama.modeling_llama.LlamaForCausalLM.from_pretrained")],
    ),
    (
        "a model's save_pretrained",
        [lookup("transformers.models.llama.modeling_llama.LlamaForCausalLM.save_pretrained")],
    ),
    (
        "operator.methodcaller",
        [constant("system"), constant(SHELL), call("operator.methodcaller", G, G + 1)],
    ),
    ("operator.attrgetter", [constant("__class__"), call("operator.attrgetter", G)]),
    (
        "a generator's frame",
        [
            lookup("torch.nn.attention.SDPBackend.MATH"),
            call("torch.nn.attention.sdpa_kernel", G),
            getattr_(G + 1, "gen"),
        ],
    ),
    ("a tensor's storage", [call("torch.Tensor.untyped_storage", 0)]),
    ("a tensor's hook", [lookup("torch.Tensor.register_hook")]),
    ("a custom op namespace", [lookup("torch.ops.myops.evil.default")]),
    ("an op library loader", [lookup("torch.ops.load_library")]),
    (
        "a logger's stream",
        [
            lookup("transformers.models.llama.modeling_llama.logger"),
            getattr_(G, "parent"),
            getattr_(G + 1, "handlers"),
            item(G + 2, 0),
            getattr_(G + 3, "stream"),
        ],
    ),
    ("entering a non-context from a lookup", [lookup("torch.float32"), enter(G)]),
    ("max with eval as key", [lookup("builtins.eval")]),
    ("importing an arbitrary module", [lookup("antigravity.fly")]),
    ("a path into the standard library", [constant(SHELL), call("os.system", G)]),
    ("a path into transformers' hub code", [lookup("transformers.utils.hub.cached_file")]),
    # Capabilities, not namespaces: living in a modeling module admits nothing.
    (
        "a classmethod's __func__ (a config loader with trust_remote_code)",
        [
            lookup(
                "transformers.models.rag.modeling_rag.RagPreTrainedModel.from_pretrained_question_encoder_generator.__func__"
            )
        ],
    ),
    (
        "a classmethod of a modeling class (bound to the class)",
        [
            lookup(
                "transformers.models.rag.modeling_rag.RagPreTrainedModel.from_pretrained_question_encoder_generator"
            )
        ],
    ),
    (
        "a modeling method that calls torch.load on a path",
        [
            lookup(
                "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.Qwen2_5OmniForConditionalGeneration.load_speakers"
            ),
            constant(MARKER),
            invoke(G, 1, G + 1),
        ],
    ),
    (
        "a modeling adapter loader (cached_file, torch.load)",
        [
            lookup(
                "transformers.models.wav2vec2.modeling_wav2vec2.Wav2Vec2PreTrainedModel.load_adapter"
            )
        ],
    ),
    ("an unbound method that loads a state dict", [lookup("torch.nn.Module.load_state_dict")]),
    (
        "an unbound method of a modeling class",
        [lookup("transformers.models.llama.modeling_llama.LlamaModel.forward")],
    ),
    (
        "a modeling helper not on the list (another model's rotary)",
        [lookup("transformers.models.mistral.modeling_mistral.apply_rotary_pos_emb")],
    ),
    (
        "a `_` name in a module the allowlist names",
        [lookup("transformers.masking_utils._preprocess_mask_arguments")],
    ),
    ("a `_` name in torch", [constant(MARKER), call("torch.serialization._load", G)]),
    (
        "a `_` method of a modeling class",
        [lookup("transformers.models.llama.modeling_llama.LlamaForCausalLM._from_config")],
    ),
    (
        "a bound method by path (a tensor class's classmethod)",
        [lookup("torch.Tensor.__torch_function__")],
    ),
    (
        "a module-level object's attribute walk",
        [lookup("transformers.models.llama.modeling_llama.logger.manager")],
    ),
    ("a class not on the list", [lookup("torch.nn.Linear")]),
    # ATen holds more than computation.
    (
        "a file mapped by an ATen factory",
        [
            constant("/etc/passwd"),
            constant(False),
            constant(32),
            lookup("torch.uint8"),
            call("aten.from_file.default", G, G + 1, G + 2, dtype=G + 3),
        ],
    ),
    (
        "a file mapped shared, to write through",
        [
            constant(MARKER),
            constant(True),
            constant(8),
            lookup("torch.uint8"),
            call("aten.from_file.default", G, G + 1, G + 2, dtype=G + 3),
        ],
    ),
    (
        "TorchScript's print, straight to the protocol's fd 1",
        [constant('{"id": 1, "result": "forged"}'), call("aten._print.default", G)],
    ),
    ("TorchScript's set_grad_enabled", [constant(False), call("aten.set_grad_enabled.default", G)]),
    ("TorchScript's manual_seed", [constant(1234), call("aten.manual_seed.default", G)]),
    ("TorchScript's Generator", [call("aten.Generator.default")]),
    (
        "an unchecked view past its storage",
        [constant([64]), constant([1]), call("aten._reshape_alias.default", 0, G, G + 1)],
    ),
    (
        "an ATen packet holding an unchecked view",
        [constant([64]), constant([1]), call("aten._reshape_alias", 0, G, G + 1)],
    ),
    (
        "a storage swapped in",
        [call("torch.Tensor.untyped_storage", 0), call("aten.set_.source_Storage", 0, G)],
    ),
    ("memory nobody wrote (ATen)", [constant([1024]), call("aten.empty.memory_format", G)]),
    ("memory nobody wrote (torch)", [constant(1024), call("torch.empty", G)]),
    (
        "memory nobody wrote (a grown tensor)",
        [constant([1024]), call("torch.Tensor.resize_", 0, G)],
    ),
]

# Patch targets a plugin may not replace (its `original` step would run them).
HOSTILE_TARGETS = [
    "builtins.open",
    "os.system",
    "subprocess.run",
    "torch.save",
    "torch.load",
    "torch.serialization.save",
    "torch.PyTorchFileWriter",
    "torch.set_rng_state",
    "transformers.models.llama.modeling_llama.torch.os.system",
    "transformers.utils.hub.cached_file",
    "transformers.modeling_utils.PreTrainedModel.save_pretrained",
    "transformers.models.auto.modeling_auto.os.system",
    "torch.utils.cpp_extension.load_inline",
    # A modeling module's own methods and loaders are not targets for living there.
    "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni.Qwen2_5OmniForConditionalGeneration.load_speakers",
    "transformers.models.wav2vec2.modeling_wav2vec2.Wav2Vec2PreTrainedModel.load_adapter",
    "transformers.models.llama.modeling_llama.LlamaForCausalLM.from_pretrained",
    "transformers.models.llama.modeling_llama.LlamaModel.forward",
    "transformers.models.llama.modeling_llama.LlamaPreTrainedModel._init_weights",
    "transformers.utils.import_utils.is_torch_available.__wrapped__",
]

# What the shipped plugins call and look up, and their targets.
ALLOWED_PATHS = [
    "builtins.int",
    "builtins.len",
    "builtins.range",
    "builtins.tuple",
    "operator.add",
    "operator.eq",
    "operator.floordiv",
    "operator.mod",
    "operator.mul",
    "operator.neg",
    "operator.sub",
    "torch.Tensor.expand",
    "torch.Tensor.expand_as",
    "torch.Tensor.reshape",
    "torch.Tensor.size",
    "torch.Tensor.to",
    "torch._check",
    "torch.add",
    "torch.amax",
    "torch.amin",
    "torch.argsort",
    "torch.cat",
    "torch.complex",
    "torch.cos",
    "torch.cumsum",
    "torch.div",
    "torch.ge",
    "torch.gt",
    "torch.index_select",
    "torch.le",
    "torch.logical_and",
    "torch.logical_not",
    "torch.lt",
    "torch.movedim",
    "torch.mul",
    "torch.nn.attention.sdpa_kernel",
    "torch.pow",
    "torch.rand",
    "torch.reshape",
    "torch.rsqrt",
    "torch.scatter_add",
    "torch.sin",
    "torch.sub",
    "torch.sum",
    "torch.sym_min",
    "torch.tensor",
    "torch.tril",
    "torch.unsqueeze",
    "torch.where",
    "transformers.masking_utils._non_vmap_expansion_sdpa",
    "torch.contiguous_format",
    "torch.nn.attention.SDPBackend.MATH",
    "aten.add.Tensor",
    "torch.ops.aten.where.self",
    "prims.convert_element_type.default",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.split",
    "torch.fft.fft",
    "torch.linalg.norm",
    "torch.special.erf",
    "math.sqrt",
    "torch.fx.experimental.symbolic_shapes.guard_or_false",
    "transformers.cache_utils.DynamicLayer.update",
    "transformers.models.llama.modeling_llama.apply_rotary_pos_emb",
    "math.isqrt",
    "torch.Tensor.narrow",
    "torch.Tensor.permute",
    "aten.upsample_bicubic2d.vec",
    "torch.Tensor.bernoulli",
    "torch.bernoulli",
    "torch.Tensor.detach",
    "torch.detach",
    "torch.Tensor.clone",
    "torch.Tensor.expand",
    "aten.expand.default",
    "aten._safe_softmax.default",
    "math.inf",
    "torch.Tensor.mean",
    "torch.masked_fill",
    "torch.matmul",
    "torch.ones",
    "torch.repeat_interleave",
    "torch.transpose",
    "torch.clamp",
    "torch.full",
    "torch.max",
    "torch.min",
    "torch.zeros",
    "torch.return_types.cummax",
    "torch.return_types.cummin",
    "torch.Tensor.cummin",
    "torch.cummin",
    "torch.Tensor.view",
    "torch.Tensor.unsqueeze",
    "torch.Tensor.exp",
    "torch.exp",
    "torch.neg",
    "torch.nn.functional.avg_pool2d",
    "transformers.cache_utils.DynamicLayer.get_mask_sizes",
    "transformers.cache_utils.DynamicLayer.get_seq_length",
    "torch.sym_max",
    "torch.float64",
    "transformers.masking_utils.sdpa_mask",
    "transformers.masking_utils.causal_mask_function",
    "torch.nn.functional.softplus",
    "torch.constant_pad_nd",
    "torch.Tensor.select",
    "torch.Tensor.unflatten",
    "torch.Tensor.flatten",
    "torch.stack",
    "torch.Tensor.new_ones",
    "torch.Tensor.tril",
    "torch.Tensor.logical_not",
    "torch.Tensor.masked_fill",
    "torch.Tensor.float",
    "torch.nn.functional.silu",
]
# Layer and configuration classes a program case may build (`program.layer_class`).
ALLOWED_LAYERS = [
    "torch.nn.RMSNorm",
    "transformers.models.llama.modeling_llama.LlamaRMSNorm",
    "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router",
]
HOSTILE_LAYERS = [
    "transformers.models.llama.modeling_llama.LlamaForCausalLM",
    "transformers.models.timm_backbone.modeling_timm_backbone.TimmBackbone",
    "torch.nn.modules.module.Module",
    "transformers.models.llama.modeling_llama.torch.nn.Linear",
]
ALLOWED_TARGETS = [
    "torch.Tensor.masked_scatter",
    "torch.chunk",
    "torch.Tensor.chunk",
    "torch.cummax",
    "torch.Tensor.cummax",
    "torch.histc",
    "torch.nn.RMSNorm.forward",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.randperm",
    "torch.reshape",
    "torch.Tensor.reshape",
    "torch.Tensor.view",
    "torch.roll",
    "torch.searchsorted",
    "torch.bucketize",
    "torch.split",
    "torch.Tensor.split",
    "torch.unsqueeze",
    "torch.exp",
    "torch.Tensor.exp",
    "torch.bernoulli",
    "torch.Tensor.bernoulli",
    "torch.detach",
    "torch.Tensor.detach",
    "torch.Tensor.expand",
    "torch.nn.functional.adaptive_avg_pool2d",
    "transformers.cache_utils.DynamicSlidingWindowLayer.get_mask_sizes",
    "transformers.cache_utils.DynamicSlidingWindowLayer.get_seq_length",
    "transformers.models.mra.modeling_mra.is_kernels_available",
    "transformers.cache_utils.DynamicSlidingWindowLayer.update",
    "transformers.cache_utils.LinearAttentionLayer.update_conv_state",
    "transformers.masking_utils._vmap_expansion_sdpa",
    "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router._cast_classifier",
    "transformers.models.dinov2.modeling_dinov2.Dinov2Embeddings.interpolate_pos_encoding",
    "transformers.models.dinov2_with_registers.modeling_dinov2_with_registers.Dinov2WithRegistersEmbeddings.interpolate_pos_encoding",
    "transformers.models.phimoe.modeling_phimoe.PhimoeRotaryEmbedding.forward",
    "transformers.models.mamba2.modeling_mamba2.mamba2_chunk_scan",
    "transformers.models.bamba.modeling_bamba.mamba2_chunk_scan",
    "transformers.models.falcon_h1.modeling_falcon_h1.mamba2_chunk_scan",
    "transformers.models.granitemoehybrid.modeling_granitemoehybrid.mamba2_chunk_scan",
    "transformers.models.nemotron_h.modeling_nemotron_h.mamba2_chunk_scan",
    "transformers.models.zamba2.modeling_zamba2.mamba2_chunk_scan",
    "transformers.models.mamba.modeling_mamba.mamba_selective_scan",
    "transformers.models.falcon_mamba.modeling_falcon_mamba.mamba_selective_scan",
    "transformers.models.jamba.modeling_jamba.mamba_selective_scan",
    "transformers.models.zamba.modeling_zamba.mamba_selective_scan",
    "transformers.utils.import_utils.is_kernels_available",
    "transformers.utils.is_kernels_available",
    "transformers.modeling_utils.is_kernels_available",
]


def deferred_targets():
    """A target in a module not imported yet: not imported to be patched,
    patched when the module is imported inside the block, refused then if the
    policy refuses it, and every original (also one a module bound by name
    while the block ran) back in place after."""
    failures = []
    yoso, rwkv = "transformers.models.yoso.modeling_yoso", "transformers.models.rwkv.modeling_rwkv"
    if yoso in sys.modules or rwkv in sys.modules:
        return [f"{yoso} or {rwkv} imported before the check"]
    import transformers.utils

    original = transformers.utils.is_kernels_available
    targets = ["transformers.utils.is_kernels_available", f"{yoso}.is_kernels_available"]
    with sandbox.patches_applied(POLICY, [PatchSpec(plugin="test", targets=targets)], None):
        if yoso in sys.modules:
            failures.append(f"a target in {yoso} imported the module")
        import transformers.models.yoso.modeling_yoso as module

        if not getattr(module.is_kernels_available, "hfx_shim", False):
            failures.append(f"a target in {yoso} not patched when the module was imported")
    if (
        module.is_kernels_available is not original
        or transformers.utils.is_kernels_available is not original
    ):
        failures.append(
            f"after the block, {yoso}.is_kernels_available is {module.is_kernels_available}, not the original"
        )
    if POLICY.shims:
        failures.append("shims left installed after a deferred target")
    # The policy decides when the module arrives: a path through a module is refused then.
    hostile = f"{rwkv}.torch.os.system"
    try:
        with sandbox.patches_applied(
            POLICY, [PatchSpec(plugin="test-hostile", targets=[hostile])], None
        ):
            import transformers.models.rwkv.modeling_rwkv  # noqa: F401
        failures.append(f"target {hostile}: accepted when its module was imported")
    except PermissionError as error:
        if "test-hostile" not in str(error):
            failures.append(f"target {hostile}: error does not name the plugin: {error}")
        print(f"refused deferred target: {hostile}: {error}")
    # Outside torch and transformers a target is refused now, and nothing is imported.
    outside = "xml.dom.minidom.parseString"
    try:
        with sandbox.patches_applied(
            POLICY, [PatchSpec(plugin="test-hostile", targets=[outside])], None
        ):
            pass
        failures.append(f"target {outside}: accepted")
    except PermissionError:
        pass
    if "xml.dom.minidom" in sys.modules:
        failures.append(f"target {outside}: its module was imported")
    return failures


def refused(what, run, failures, cause=PermissionError):
    """Runs `run`; a failure unless it raises (`cause` itself, or as a PatchProgramError's cause)."""
    try:
        run()
        failures.append(f"{what}: ran")
    except sandbox.PatchProgramError as error:
        if not isinstance(error.__cause__, cause):
            failures.append(
                f"{what}: refused by {type(error.__cause__).__name__}, not the policy: {error}"
            )
        else:
            print(f"refused: {what}: {error}")
        return error
    except cause as error:
        print(f"refused: {what}: {error}")
        return error
    except Exception as error:  # noqa: BLE001
        failures.append(
            f"{what}: failed with {type(error).__name__}, not refused by the policy: {str(error)[:200]}"
        )
    return None


def originals_checked(failures):
    """An `original` step's result is judged like any result: no module, no function off the list."""
    import os as os_module

    for what, original in (
        ("an original returning a module", lambda *a: os_module),
        ("an original returning a loader", lambda *a: torch.load),
        ("an original returning a shell", lambda *a: os_module.system),
        ("an original returning a module in a tuple", lambda *a: (a[0], os_module)),
    ):
        program = {"steps": [{"original": {"op": "", "args": [0], "kwargs": []}}], "output": G}
        refused(
            what,
            lambda: sandbox.run_program(POLICY, program, given(), original, {0, 1}, None),
            failures,
        )
    program = {"steps": [{"original": {"op": "", "args": [0], "kwargs": []}}], "output": G}
    try:
        sandbox.run_program(POLICY, program, given(), lambda x: (x + 1, x.shape), {0, 1}, None)
    except Exception as error:  # noqa: BLE001
        failures.append(f"an original returning tensors: {error}")


def self_invoking_callback(failures):
    """A program whose callback calls the same target again: a bounded refusal of one short line."""
    program = {
        "steps": [{"callback": {"target": "torch.roll", "captured": [0]}}, invoke(1)],
        "output": 2,
    }
    asked = []

    def ask(call):
        asked.append(call)
        return program

    error = refused(
        "a self-invoking callback",
        lambda: sandbox.answer_call(
            POLICY,
            ask,
            "test-hostile",
            "torch.roll",
            torch.roll,
            (torch.randn(2),),
            {},
            sandbox.Answers(),
        ),
        failures,
    )
    if error is not None:
        line = str(error)
        if len(line) > sandbox.MAX_MESSAGE + 100 or "\n" in line or "test-hostile" not in line:
            failures.append(
                f"a self-invoking callback: the refusal is {len(line)} chars, not one bounded line naming the plugin"
            )
        if len(asked) > sandbox.MAX_CALLBACK_DEPTH + 1:
            failures.append(f"a self-invoking callback: asked the plugin {len(asked)} times")


def layers_checked(failures):
    """A program case's layers and configuration classes are allowlist entries; values naming code are refused."""
    from hfx_worker import program

    for path in ALLOWED_LAYERS:
        try:
            program.layer_class(POLICY, path, "test")
        except Exception as error:  # noqa: BLE001
            failures.append(f"allowed layer {path}: {type(error).__name__}: {error}")
    for path in HOSTILE_LAYERS:
        refused(f"layer {path}", lambda: program.layer_class(POLICY, path, "test"), failures)
    config = "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeConfig"
    for key, value in (
        ("auto_map", {"AutoModel": "evil--x.Y"}),
        ("attn_implementation", "kernels-community/evil"),
        ("_attn_implementation", "kernels-community/evil"),
    ):
        spec = {
            "class": "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router",
            "config": config,
            "values": {key: "x" if not isinstance(value, dict) else "y"},
        }
        refused(
            f"a layer's configuration value `{key}`",
            lambda: program.layer(POLICY, "router", spec),
            failures,
        )
    spec = {
        "class": "transformers.models.nllb_moe.modeling_nllb_moe.NllbMoeTop2Router",
        "config": "transformers.models.llama.modeling_llama.LlamaForCausalLM.config_class",
        "values": {},
    }
    refused(
        "a configuration class off the list, reached through a model class",
        lambda: program.layer(POLICY, "router", spec),
        failures,
    )


def tasks_checked(failures):
    """A patch case's `architecture.task` names a model class, never a function or loader."""
    import transformers
    from hfx_worker import sources
    from hfx_worker.errors import UserInputError

    config = transformers.LlamaConfig(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    for task in (
        "pipeline",
        "AutoTokenizer",
        "load_tf2_weights_in_pytorch_model",
        "logger",
        "_from_config",
        "apply_rotary_pos_emb",
        "LlamaRMSNorm",
        "torch",
    ):
        refused(
            f"task {task}",
            lambda: sources.model_class(task, config),
            failures,
            # A name that is not a model class at its home is the user's error, in one line.
            (PermissionError, ValueError, UserInputError),
        )
    for task in ("LlamaForCausalLM", "AutoModel", "LlamaModel"):
        try:
            sources.model_class(task, config)
        except Exception as error:  # noqa: BLE001
            failures.append(f"task {task}: {type(error).__name__}: {error}")


def lazy_dtype(failures):
    """A case's dtype name is looked up in torch's own namespace: `_dynamo` or
    `onnx` would have torch import a submodule (and register its ops) first."""
    from hfx_worker import graph, program

    before = set(sys.modules)
    refused(
        "a lazy submodule of torch, looked up by a program",
        lambda: POLICY.resolve_op("torch.onnx"),
        failures,
    )
    for name in ("_dynamo", "onnx", "_inductor"):
        refused(
            f"dtype `{name}` in an IR case",
            lambda: graph.decode_value({"tensor": {"dtype": name, "shape": [], "data": ""}}),
            failures,
            ValueError,
        )
        refused(
            f"dtype `{name}` in a program case",
            lambda: program.argument(POLICY, {"dtype": name}, [], 0),
            failures,
            program.ProgramError,
        )
    imported = sorted(set(sys.modules) - before)
    if imported:
        failures.append(f"a lookup or a dtype name imported {', '.join(imported[:5])}")


def main():
    failures = []
    rng = torch.get_rng_state()
    dtype = torch.get_default_dtype()
    for what, steps in HOSTILE:
        program = {"steps": steps, "output": G + len(steps) - 1}
        slots = given()
        refused(
            what,
            lambda: sandbox.run_program(POLICY, program, slots, None, set(range(len(slots))), None),
            failures,
        )
    for target in HOSTILE_TARGETS:
        try:
            sandbox.resolve_target(POLICY, "test-hostile", target)
            failures.append(f"target {target}: accepted")
        except PermissionError as error:
            if "test-hostile" not in str(error) and target.split(".")[0] in (
                "torch",
                "transformers",
            ):
                failures.append(f"target {target}: error does not name the plugin: {error}")
            print(f"refused target: {target}: {error}")
        except (AttributeError, ImportError) as error:
            failures.append(
                f"target {target}: {type(error).__name__} instead of a refusal: {error}"
            )
    if os.path.exists(MARKER):
        failures.append(f"a hostile program wrote {MARKER}")
    if (
        not torch.equal(torch.get_rng_state(), rng)
        or torch.get_default_dtype() != dtype
        or not torch.is_grad_enabled()
    ):
        failures.append("a hostile program changed torch's global state")
    lazy_dtype(failures)
    for path in ALLOWED_PATHS:
        try:
            POLICY.resolve_op(path)
        except Exception as error:  # noqa: BLE001
            failures.append(f"allowed path {path}: {type(error).__name__}: {error}")
    for target in ALLOWED_TARGETS:
        try:
            sandbox.resolve_target(POLICY, "test", target)
        except Exception as error:  # noqa: BLE001
            failures.append(f"allowed target {target}: {type(error).__name__}: {error}")
    # A path another patch replaced resolves to its shim, which a program may call.
    with sandbox.patches_applied(
        POLICY, [PatchSpec(plugin="test", targets=["torch.roll", "torch.Tensor.reshape"])], None
    ):
        for path in ("torch.roll", "torch.Tensor.reshape"):
            try:
                assert getattr(POLICY.resolve_op(path), "hfx_shim", False), path
            except Exception as error:  # noqa: BLE001
                failures.append(f"a shimmed path {path}: {type(error).__name__}: {error}")
    if POLICY.shims or getattr(torch.roll, "hfx_shim", False):
        failures.append("shims left installed")
    failures.extend(deferred_targets())
    originals_checked(failures)
    self_invoking_callback(failures)
    layers_checked(failures)
    tasks_checked(failures)
    # A context made by an allowed function may be entered, and a program may
    # use a layer it was handed.
    program = {
        "steps": [
            lookup("torch.nn.attention.SDPBackend.MATH"),
            call("torch.nn.attention.sdpa_kernel", G),
            enter(G + 1),
            invoke(1, 0),
        ],
        "output": G + 3,
    }
    try:
        sandbox.run_program(POLICY, program, given(), None, {0, 1}, None)
    except Exception as error:  # noqa: BLE001
        failures.append(f"entering sdpa_kernel and invoking the given layer: {error}")
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print(
        f"{len(HOSTILE)} hostile programs and {len(HOSTILE_TARGETS)} hostile targets refused; "
        f"{len(ALLOWED_PATHS)} paths and {len(ALLOWED_TARGETS)} targets allowed"
    )


if __name__ == "__main__":
    main()
