"""Export for generation: the components a generative model splits into, and
the check that they generate what the model generates.

`capture_generation` runs `model.generate` once on the sample inputs with the
model's forward wrapped, and keeps each call's keyword arguments: the first
call is `prefill` (the prompt, an empty cache), the next `decode` (one token
and the cache prefill filled). These are the reference's components
(transformers 5.24, `exporters.utils.decompose_prefill_decode`): the same
names, the same kwargs, so the same inputs and outputs. Each component is then
traced by a `trace` request of its own (`SourceParamsCaptured`), through every
stage a single export goes through.

`generate_check` is what the reference does not do: greedy decoding through
the exported components, against `model.generate` in eager. The loop is
transformers' own `generate` with the model's forward replaced by the
components (the first call to `prefill`, the others to `decode`), so every
architecture gets the kwargs its own `prepare_inputs_for_generation` builds
(positions, masks, cache positions, a sliding-window or state-space cache)
and the check proves the components serve exactly the calls generation makes.
The same loop written out for a decoder-only model, what a user writes to
generate with the components alone, is the README's
(`tests/python/generation_loops.py` runs it).
"""

import contextlib
import copy
import functools
import inspect
import os
import time

from . import eager_quantize
from .errors import UserInputError
from .messages import (
    CapturedComponent,
    CaptureGenerationReply,
    ComponentCalls,
    FloatStep,
    GenaiTokens,
    GenerateCheckReply,
    GeneratedTokens,
    GenerateReply,
    GenerateStep,
    SourceParamsArchitecture,
    SourceParamsCaller,
    SourceParamsDirectory,
    SourceParamsFunction,
)
from .precompute import precomputed
from .protocol import ProtocolError, Unsupported
from .pytree import register_cache_pytrees, spec_paths
from .round_trip import int4_weights
from .sources import built, directory_class, from_directory, reference_attention
from .trace import TracedComponent, built_model, save_configs
from .verify import component_runner

# A captured call's kwargs that are generation-time hints, not forward inputs.
HINTS = ("logits_to_keep",)


class Generation:
    """What the session keeps of a `capture_generation`: the model, the prompt
    (`generate` kwargs), the static cache's length if any, each component's
    captured kwargs (`{name: kwargs}`, in order) and, once traced, what its
    runner needs to call it as the model is called (`traced`)."""

    def __init__(self, model, prompt, max_cache_len, components, modules):
        self.model = model
        self.prompt = prompt
        self.max_cache_len = max_cache_len
        self.components = components
        # The module each component is a call of: the model, or a part of a multimodal one.
        self.modules = modules
        self.traced = {}


@contextlib.contextmanager
def captured_calls(module, clock=None):
    """Every call of `module.forward` while the block runs, as kwargs (positional
    arguments bound to their names), deep-copied before the call mutates them
    (a cache grows in place); with `clock`, as `(clock(), kwargs)`."""
    calls = []
    original = module.forward
    signature = inspect.signature(original)

    @functools.wraps(original)
    def forward(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        captured = {}
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind == inspect.Parameter.VAR_KEYWORD:
                captured.update(copy.deepcopy(value))
            elif kind != inspect.Parameter.VAR_POSITIONAL:
                captured[name] = copy.deepcopy(value)
        calls.append(captured if clock is None else (clock(), captured))
        return original(*args, **kwargs)

    module.forward = forward
    try:
        yield calls
    finally:
        del module.forward  # the class's forward shows again


def generation_config(model, new_tokens, max_cache_len):
    """The model's generation config for `new_tokens` greedy tokens, with a
    static cache of `max_cache_len` positions when asked."""
    config = copy.deepcopy(model.generation_config)
    config.max_new_tokens = config.min_new_tokens = new_tokens
    config.do_sample = False
    config.num_beams = 1
    if max_cache_len is not None:
        config.cache_implementation = "static"
        config.max_cache_len = max_cache_len
    return config


def merge_decode_steps(steps):
    """Consecutive single-token decode calls as one multi-token decode (its
    sequence axis then stays symbolic; a single token specializes it to 1):
    the first call's cache, the per-token inputs concatenated along their
    sequence axis, the 2D padding mask of the last step, 4D causal masks
    concatenated along the query axis. As the reference's `_merge_decode_calls`."""
    import torch

    def query_length(call):
        for key in ("input_ids", "inputs_embeds"):
            if call.get(key) is not None:
                return call[key].shape[1]
        return None

    if any(query_length(call) != 1 for call in steps):
        return copy.copy(steps[-1])  # no cache: each step already runs the whole sequence
    merged = copy.copy(steps[0])
    for key, dim in (
        ("input_ids", 1),
        ("inputs_embeds", 1),
        ("audio_latents", 1),
        ("cache_position", 0),
        ("position_ids", -1),
    ):
        values = [call.get(key) for call in steps]
        if all(v is not None for v in values):
            merged[key] = torch.cat(values, dim=dim)
    masks = [call.get("attention_mask") for call in steps]
    if all(m is not None for m in masks):
        merged["attention_mask"] = merge_masks(masks)
    return merged


def merge_masks(masks):
    import torch

    last = masks[-1]
    if last is None:
        return None
    if isinstance(last, dict):
        return {key: merge_masks([m[key] for m in masks]) for key in last}
    if last.dim() == 4 and all(m.shape[3] == last.shape[3] for m in masks):
        return torch.cat(masks, dim=2)
    return last


def capture(model, inputs, multi_token_decode, max_cache_len):
    """The components of one `model.generate` call, in order, as `{name:
    (module, kwargs)}`: `prefill` and `decode` (after an encoder-decoder's
    `encoder`); for a multimodal model the
    prefill's parts instead of `prefill` (`image_encoder`, `audio_encoder`,
    `multi_modal_projector`, `language_model`, `lm_head`, in the order data
    flows through them: each part's last
    call up to the end of the first forward), then `decode`."""
    import torch

    if not (hasattr(model, "can_generate") and model.can_generate()):
        raise Unsupported(
            f"--generation: {type(model).__name__} does not generate (no `generate`); "
            "export it without --generation, or pick its generative class with --task"
        )
    new_tokens = 3 if multi_token_decode else 2
    config = generation_config(model, new_tokens, max_cache_len)
    parts = multimodal_parts(model)
    encoder = None if parts else generated_encoder(model)
    watched = parts or ({"encoder": encoder} if encoder is not None else {})
    with torch.no_grad(), captured_calls(model) as calls, contextlib.ExitStack() as stack:
        # Each part's calls, with how many forward calls had started by then.
        part_calls = {
            name: stack.enter_context(captured_calls(module, lambda: len(calls)))
            for name, module in watched.items()
        }
        model.generate(**copy.deepcopy(inputs), generation_config=config)
    if len(calls) < new_tokens:
        raise Unsupported(
            f"--generation: `generate` called {type(model).__name__}.forward {len(calls)} time(s) for "
            f"{new_tokens} new tokens; it generates through another module, which hfx cannot split "
            "into prefill and decode"
        )
    for call in calls:
        for hint in HINTS:
            call.pop(hint, None)
        contiguous(call)
    decode = merge_decode_steps(calls[1:new_tokens]) if multi_token_decode else calls[1]
    if not parts:
        components = {"prefill": (model, calls[0]), "decode": (model, decode)}
        # An encoder-decoder's encoder, which `generate` runs before the first
        # forward (prefill takes its outputs): a component of its own, so the
        # folder runs from the model's own inputs (audio features, text).
        encoder_calls = [kwargs for _, kwargs in part_calls.get("encoder", [])]
        if encoder_calls:
            components = {"encoder": (encoder, contiguous(encoder_calls[-1])), **components}
        return components
    # The prefill's parts as the reference captures them: one forward on the
    # prefill's kwargs (without `generate`'s hints, so the head sees every
    # position), each part's last call; a part that forward does not call
    # (an encoder `generate` ran before it) from the `generate` call.
    with torch.no_grad(), contextlib.ExitStack() as stack:
        forward_calls = {
            name: stack.enter_context(captured_calls(module)) for name, module in parts.items()
        }
        model(**copy.deepcopy(calls[0]))
    components = {}
    for name, module in parts.items():
        during_generate = [kwargs for started, kwargs in part_calls[name] if started <= 1]
        chosen = forward_calls[name] or during_generate
        if chosen:
            components[name] = (module, contiguous(chosen[-1]))
    components["decode"] = (model, decode)
    return components


def generated_encoder(model):
    """An encoder-decoder's encoder (`get_encoder()`), else None."""
    if not getattr(model.config, "is_encoder_decoder", False) or not hasattr(model, "get_encoder"):
        return None
    encoder = model.get_encoder()
    return encoder if encoder is not None and encoder is not model else None


# A multimodal model's parts, as the reference finds them (transformers 5.24,
# `exporters.utils._find_multimodal_submodules`): encoders by `get_encoder`,
# the language model by `get_decoder`, projector and head by name.
PROJECTORS = ("multi_modal_projector", "connector", "embed_vision", "embed_audio")
HEADS = ("lm_head",)


def multimodal_parts(model):
    """`{name: module}` for a model with a modality encoder and a language
    model; `{}` for any other model. The reference exports only the parts
    its capture sees called inside the prefill's forward; transformers 5.24's
    `generate` runs the encoders (and projector) before it, so hfx captures
    each part's calls during `generate` itself: the image or audio encoder
    is a component too."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        return {}
    found = {}
    for modality in ("image", "audio"):
        encoder = model.get_encoder(modality=modality)
        if encoder is not None and encoder is not model:
            found[f"{modality}_encoder"] = encoder
    if not found:
        return {}
    decoder = model.get_decoder()
    if decoder is None or decoder is model:
        return {}
    found["language_model"] = decoder
    for names in (PROJECTORS, HEADS):
        for root in (model, model.base_model):
            for name in names:
                if name not in found and getattr(root, name, None) is not None:
                    found[name] = getattr(root, name)
    # In the order data flows: encoders, projectors, language model, head.
    order = (
        [n for n in found if n.endswith("_encoder")]
        + [n for n in found if n in PROJECTORS]
        + ["language_model"]
        + [n for n in found if n in HEADS]
    )
    return {name: found[name] for name in order}


def contiguous(value):
    """`value` with every tensor in it contiguous (caches changed in place).
    A component's cache comes from another component's outputs, which are
    contiguous; a decode traced on eager's sliced cache (a sliding window's
    view) would guard on those strides."""
    import torch

    if torch.is_tensor(value):
        return value.contiguous()
    if isinstance(value, list):
        return [contiguous(v) for v in value]
    if isinstance(value, tuple):
        return (
            type(value)(*map(contiguous, value))
            if hasattr(value, "_fields")
            else tuple(map(contiguous, value))
        )
    if isinstance(value, dict):
        for key in list(value):
            value[key] = contiguous(value[key])
        return value
    if hasattr(value, "__dict__") and not callable(value) and not isinstance(value, type):
        for key, item in vars(value).items():
            setattr(value, key, contiguous(item))
    return value


def describe(value):
    """A captured kwarg's tensor leaves' shapes, by leaf path (`cache.layers.0.keys`)."""
    from .pytree import named_leaves

    return {path: list(leaf.shape) for path, leaf in named_leaves(value)}


def left_padded(model, prompt):
    """Sample `prompt` as a batch of prompts of different lengths: the first
    row left-padded by a quarter of its length (at least one token). With a
    mask of ones `generate` drops `attention_mask` (5.24), so the components
    would take none and a padded batch could not run; padded, it is an input
    of prefill and decode, and the generation check generates a padded batch."""
    mask = prompt.get("attention_mask")
    if mask is None or mask.dim() != 2 or mask.shape[1] < 2:
        return prompt
    padded = dict(prompt)
    pad = max(1, mask.shape[1] // 4)
    padded["attention_mask"] = mask.clone()
    padded["attention_mask"][0, :pad] = 0
    # A model that does not generate has no generation config; `capture` refuses it.
    pad_token = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
    if isinstance(pad_token, int) and "input_ids" in prompt:
        padded["input_ids"] = prompt["input_ids"].clone()
        padded["input_ids"][0, :pad] = pad_token
    return padded


def capture_generation(session, params):
    """The `capture_generation` request: build the model, capture its
    components, keep them in the session for the `trace` requests that follow."""
    generated = (
        SourceParamsArchitecture,
        SourceParamsDirectory,
        SourceParamsFunction,
        SourceParamsCaller,
    )
    if not isinstance(params.source, generated):
        kinds = ", ".join(f"`{source.kind}`" for source in generated)
        raise ProtocolError(
            f"{params.NAME}, field `source`: kind `{params.source.kind}` (expected {kinds})"
        )
    started = time.perf_counter()
    with session.during("build"):
        model, inputs = built_model(session, params, generative=True, quantize=False)
    # Inputs a caller or a model function gave are generated from as given.
    given = isinstance(params.source, SourceParamsFunction) or (
        isinstance(params.source, SourceParamsCaller) and session.caller.inputs is not None
    )
    if not given:
        inputs = left_padded(model, inputs)
    # Quantized as `generate` runs, each module after its first call: what
    # the capture keeps of each call (its inputs' shapes and structure) does
    # not depend on the weights' precision, torchao's quantized eager prefill
    # is many times a float one, and a float weight quantized once read
    # leaves memory before the next is read.
    with eager_quantize.quantized_as_it_runs(model, params.quantize):
        captured = capture(model, inputs, params.multi_token_decode, params.max_cache_len)
    # Each component traced with what its module computes from sizes by loops
    # precomputed (`precompute`), as `Components` computes it for each call.
    components = {name: precomputed(module, kwargs) for name, (module, kwargs) in captured.items()}
    modules = {name: module for name, (module, _) in captured.items()}
    session.generation = Generation(model, inputs, params.max_cache_len, components, modules)
    if params.folder:
        # A static cache's length is the generation config's (`cache_implementation`, `max_cache_len`).
        config = None
        if params.max_cache_len is not None:
            config = copy.deepcopy(model.generation_config)
            config.cache_implementation, config.max_cache_len = "static", params.max_cache_len
        save_configs(model, params.folder, config)
    return CaptureGenerationReply(
        model_class=type(model).__name__,
        components=[
            CapturedComponent(name=name, inputs=describe(kwargs))
            for name, kwargs in components.items()
        ],
        seconds=time.perf_counter() - started,
    )


# ── Generating with the components ──


class Components:
    """The exported components in place of the modules they were captured
    from, for one `generate` call. A text model: its forward's first call
    goes to `prefill`, every later one to `decode` (an encoder-decoder's
    encoder, which `generate` calls first, to `encoder`). A multimodal model: each
    part's forward is its component (the encoders `generate` runs first; the
    language model and head inside the first forward), and every forward call
    after the first goes to `decode`. Each call's kwargs are what `generate`
    and the model built for it, minus the ones the component was not traced
    with (as the reference's `ExportedModel.__call__` drops them)."""

    def __init__(self, model, runners, modules):
        self.model = model
        self.runners = runners
        self.modules = modules
        self.calls = 0
        self.called = dict.fromkeys(runners, 0)  # per component
        self.forward = model.forward
        # `generate` passes what the forward's signature names (`position_ids`, ...).
        self.__signature__ = inspect.signature(model.forward)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls > 1:
            return self.call("decode", kwargs)
        if "prefill" in self.runners:
            return self.call("prefill", kwargs)
        return self.forward(*args, **kwargs)  # the parts inside it are components

    def call(self, name, kwargs):
        self.called[name] += 1
        runner = self.runners[name]
        # What the component was traced with precomputed from this call's sizes, as at capture.
        kwargs = precomputed(self.modules[name], dict(kwargs))
        given = {k: v for k, v in kwargs.items() if k in runner.kwargs}
        if "attention_mask" in runner.kwargs and given.get("attention_mask") is None:
            given["attention_mask"] = unpadded_mask(given)
        return runner(**given)

    @contextlib.contextmanager
    def in_place(self):
        """The model's forward and its parts' forwards replaced while the block runs."""
        replaced = [self.model]
        self.model.forward = self
        try:
            for name, module in self.modules.items():
                if module is not self.model:
                    module.forward = self.part(name, module.forward)
                    replaced.append(module)
            yield
        finally:
            for module in replaced:
                del module.forward

    def part(self, name, original):
        signature = inspect.signature(original)

        def forward(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            given = dict(bound.arguments)
            for key, parameter in signature.parameters.items():
                if parameter.kind == inspect.Parameter.VAR_KEYWORD:
                    given.update(given.pop(key, {}))
            return self.call(name, given)

        forward.__signature__ = signature
        return forward


def unpadded_mask(kwargs):
    """The mask `generate` leaves out for a prompt without padding (5.24
    drops a 2D mask of ones, and builds no 4D mask where attention is
    causal alone), which a component traced on a padded prompt takes: a 2D
    mask of ones over the cached positions and the call's tokens, or for a
    fixed-size cache (`is_compileable`, the masks `generate` builds 4D) the
    causal mask over the cache's length, as SDPA takes it (bool)."""
    import torch

    ids = kwargs.get("input_ids")
    if ids is None:
        return None
    cache = kwargs.get("cache")
    try:
        past = cache.get_seq_length() if hasattr(cache, "get_seq_length") else 0
    except ValueError:
        # A cache of state-space or linear-attention layers (Mamba's) keeps no
        # length: such components are called with what `generate` passes.
        return None
    batch, length = ids.shape[0], ids.shape[1]
    if not getattr(cache, "is_compileable", False):
        return torch.ones((batch, past + length), dtype=torch.long)
    size = cache.get_max_length()
    causal = torch.arange(size)[None, :] <= (past + torch.arange(length))[:, None]
    return causal[None, None].repeat(batch, 1, 1, 1)


def new_tokens(generated):
    """The tokens `generate` added: one per step's logits, at the end of the
    sequences (which start with the prompt, or for an encoder-decoder with
    the decoder's prompt and its start token)."""
    return generated.sequences[:, generated.sequences.shape[1] - len(generated.logits) :]


def generate_check(session, params):
    """`generate_check`: greedy tokens through the components (in their
    runtime) against `model.generate` in eager, and the logits of each step.
    Teacher forced (`params.teacher_forced`), each step's input is eager's
    token and each step's tokens are the components' choice in that context."""
    import torch

    generation = session.generation
    if generation is None:
        raise ValueError("generate_check: no components were captured in this worker")
    model, prompt = generation.model, generation.prompt
    config = generation_config(model, params.steps, generation.max_cache_len)

    def generate(forced=None):
        processors = [] if forced is None else [ForcedTokens(forced)]
        with torch.no_grad(), reference_attention(model):
            return model.generate(
                **copy.deepcopy(prompt),
                generation_config=config,
                logits_processor=processors,
                return_dict_in_generate=True,
                output_logits=True,
            )

    # Int4 components' eager reference: the model with their weights round-tripped.
    weights = contextlib.nullcontext
    float_tokens = None
    if params.int4 is not None:
        weights = functools.partial(int4_weights, model, params.int4)
        float_tokens = new_tokens(generate())
    with weights():
        eager = generate()
    want = new_tokens(eager)
    runners, providers = {}, []
    for name, artifact in params.components.items():
        traced = generation.traced.get(name)
        if traced is None:
            raise ValueError(f"generate_check: component `{name}` was not traced in this worker")
        runners[name], found = component_runner(artifact, traced)
        providers.extend(p for p in found if p not in providers)
    missing = [name for name in generation.components if name not in runners]
    if missing:
        raise ValueError(f"generate_check: no artifact for {', '.join(missing)}")

    def through_components(forced):
        components = Components(model, runners, generation.modules)
        with components.in_place():
            exported = generate(forced)
        chosen = chosen_tokens(exported) if forced is not None else new_tokens(exported)
        return exported, chosen, components

    forced = want if params.teacher_forced else None
    exported, got, components = through_components(forced)
    # Counted before the float model's run below calls the same runners again.
    calls = [
        ComponentCalls(
            name=name,
            calls=components.called[name],
            state_loads=getattr(runners[name], "state_loads", lambda: None)(),
        )
        for name in generation.components
    ]
    against_float = None
    if float_tokens is not None:
        # Teacher forced, the components in the float model's context: what
        # they choose where it chose. Free running, their own tokens are it.
        against_float = through_components(float_tokens)[1] if params.teacher_forced else got
    steps = []
    for i, (w, g) in enumerate(zip(eager.logits, exported.logits)):
        diff = (w.double() - g.double()).abs()
        steps.append(
            GenerateStep(
                tokens=tokens_at(got, i),
                eager_tokens=tokens_at(want, i),
                max_abs=float(diff.max()) if diff.numel() and torch.isfinite(diff).all() else None,
                ok=w.shape == g.shape
                and (
                    bool(diff.max() <= params.atol * w.double().abs().max())
                    if params.atol_of_max
                    else torch.allclose(g.double(), w.double(), atol=params.atol, rtol=params.rtol)
                ),
                against_float=None
                if float_tokens is None
                else FloatStep(
                    tokens=tokens_at(against_float, i), float_tokens=tokens_at(float_tokens, i)
                ),
            )
        )
    return GenerateCheckReply(
        identical=bool(want.shape == got.shape and torch.equal(want, got)),
        teacher_forced=params.teacher_forced,
        steps=steps,
        calls=calls,
        providers=providers,
        genai=None
        if params.genai is None
        else genai_tokens(generation, params.genai, params.steps, weights),
    )


class ForcedTokens:
    """Teacher forcing inside `generate` (a logits processor): step i's
    choice is `tokens[:, i]` whatever the scores say. `output_logits` keeps the scores as the model
    gave them, before any processor."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.step = 0

    def __call__(self, input_ids, scores):
        import torch

        forced = torch.full_like(scores, -float("inf"))
        forced[torch.arange(scores.shape[0]), self.tokens[:, self.step]] = 0
        self.step += 1
        return forced


def chosen_tokens(generated):
    """Each step's greedy choice from its logits (rows x steps), whatever token was fed on."""
    import torch

    return torch.stack([logits.argmax(-1) for logits in generated.logits], dim=1)


def tokens_at(tokens, step):
    """Each row's token at `step` of `tokens` (rows x steps): none past the end."""
    return [int(t) for t in tokens[:, step]] if step < tokens.shape[1] else []


def genai_tokens(generation, folder, steps, weights=contextlib.nullcontext):
    """`steps` greedy tokens from ONNX Runtime GenAI's own `Generator` over
    the package in `folder` (`genai_config.json` and its decoder), against
    eager `generate`'s (with the model's `weights`: an int4 package's
    round-tripped), for each prompt row without its padding: GenAI pads
    and masks a batch itself, so each row is generated alone, from its tokens.
    Both generate at least `steps` tokens (an end-of-sequence token does not
    stop either)."""
    import onnxruntime_genai as og
    import torch

    model, prompt = generation.model, generation.prompt
    config = generation_config(model, steps, None)
    mask = prompt.get("attention_mask")
    genai_model = og.Model(str(folder))
    rows, eager_rows = [], []
    for row, ids in enumerate(prompt["input_ids"]):
        if mask is not None:
            ids = ids[mask[row].bool()]
        with torch.no_grad(), weights(), reference_attention(model):
            eager = model.generate(
                input_ids=ids[None],
                attention_mask=torch.ones_like(ids[None]),
                generation_config=config,
            )
        eager_rows.append([int(t) for t in eager[0, len(ids) :]])
        length = len(ids) + steps
        tokens = genai_generated(
            genai_model, ids, steps, {"max_length": length, "min_length": length}
        )
        rows.append(tokens)
    return GenaiTokens(identical=rows == eager_rows, tokens=rows, eager_tokens=eager_rows)


def genai_generated(genai_model, ids, steps, options, on_token=None):
    """At most `steps` tokens ONNX Runtime GenAI's `Generator` generates after
    the prompt `ids` (a 1D tensor) with the search `options` (greedy unless
    they sample), each handed to `on_token` as it comes."""
    import numpy as np
    import onnxruntime_genai as og

    search = og.GeneratorParams(genai_model)
    search.set_search_options(**{"do_sample": False, **options})
    generator = og.Generator(genai_model, search)
    generator.append_tokens(np.asarray([ids.tolist()], dtype=np.int32))
    tokens = []
    while not generator.is_done() and len(tokens) < steps:
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
        if on_token is not None:
            on_token(tokens[-1])
    return tokens


# ── Generating text from an export folder ──


def generate_text(session, params):
    """`generate`: the folder's tokenizer encodes the prompt, its components
    (each in its runtime, in place of the model's forward as `generate_check`
    runs them) or its GenAI package generate, and the text goes to the host
    as it is produced; with `params.compare`, that model folder generates
    eagerly from the same prompt, under the same generation config and seed."""
    import torch
    import transformers

    started = time.perf_counter()
    folder = str(params.folder)
    with session.during("build"):
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        )
        model = skeleton(folder)
    encoded = tokenizer(params.prompt, return_tensors="pt")
    # What a decoder's forward takes (a tokenizer may add `token_type_ids`).
    prompt = {k: encoded[k] for k in ("input_ids", "attention_mask") if k in encoded}
    if prompt["input_ids"].shape[1] == 0:
        raise UserInputError("model", "--prompt: the tokenizer makes no tokens of it")
    config = text_generation_config(model, params)
    streamer = TextSent(tokenizer, session.channel)
    torch.manual_seed(params.seed)
    if params.genai:
        import onnxruntime_genai as og

        options = {"max_length": prompt["input_ids"].shape[1] + params.max_new_tokens}
        if params.sampling is not None:
            options.update(
                do_sample=True,
                temperature=params.sampling.temperature,
                top_k=params.sampling.top_k,
                random_seed=params.seed,
            )
        streamer.put(prompt["input_ids"])  # the prompt, which the streamer skips
        ids = genai_generated(
            og.Model(folder),
            prompt["input_ids"][0],
            params.max_new_tokens,
            options,
            on_token=lambda token: streamer.put(torch.tensor([token])),
        )
        streamer.end()
        providers = ["ONNX Runtime GenAI"]
    else:
        runners, providers = folder_runners(model, params.components)
        components = Components(model, runners, component_modules(model, runners))
        with torch.no_grad(), components.in_place():
            sequences = model.generate(**prompt, generation_config=config, streamer=streamer)
        ids = generated_ids(model, prompt, sequences)
    eager = None
    if params.compare is not None:
        with session.during("build"):
            source = from_directory(str(params.compare), None, False).eval()
        source.generation_config = model.generation_config
        torch.manual_seed(params.seed)
        with torch.no_grad():
            sequences = source.generate(**prompt, generation_config=config)
        eager = tokens_of(tokenizer, generated_ids(source, prompt, sequences))
    return GenerateReply(
        prompt_tokens=int(prompt["input_ids"].shape[1]),
        generated=tokens_of(tokenizer, ids),
        eager=eager,
        providers=providers,
        seconds=time.perf_counter() - started,
    )


def skeleton(folder):
    """The model class the export folder's `config.json` names, its weights
    uninitialised memory (never read: every forward `generate` makes goes to
    the components), with the folder's generation config: what
    `generate`'s loop needs of the model (its config, its input preparation,
    its cache)."""
    import torch
    import transformers

    cls, config = directory_class(folder, None, False)
    with torch.device("meta"):
        model = built(cls, config)
    model = model.to_empty(device="cpu").eval()
    if not (hasattr(model, "can_generate") and model.can_generate()):
        raise Unsupported(
            f"{os.path.join(folder, 'config.json')}: {type(model).__name__} does not generate; "
            "hfx generate runs the folders `hfx run --generation -o DIR` writes"
        )
    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        model.generation_config = transformers.GenerationConfig.from_pretrained(folder)
    return model


def text_generation_config(model, params):
    """The folder's generation config (a static cache's length included) for
    `params.max_new_tokens` tokens, greedy or sampled as asked."""
    config = copy.deepcopy(model.generation_config)
    config.max_new_tokens = params.max_new_tokens
    config.num_beams = 1
    config.do_sample = params.sampling is not None
    if params.sampling is not None:
        config.temperature = params.sampling.temperature
        config.top_k = params.sampling.top_k
    else:
        config.temperature = config.top_k = config.top_p = None
    return config


def folder_runners(model, components):
    """`({name: runner}, providers)`: each folder component's runner, called
    as the model is (`verify.component_runner`), from what `export.json`
    records of its trace."""
    from torch.utils._pytree import treespec_loads

    register_cache_pytrees(model)
    runners, providers = {}, []
    for name, component in components.items():
        traced = TracedComponent(
            kwargs=component.kwargs,
            input_paths=spec_paths(treespec_loads(component.in_spec)),
            out_spec=component.out_spec,
            out_constants=component.out_constants,
        )
        runners[name], found = component_runner(component.artifact, traced)
        providers.extend(p for p in found if p not in providers)
    return runners, providers


def component_modules(model, runners):
    """The module each component of a text model stands in for: an
    encoder-decoder's encoder, else the model. A multimodal model's parts run
    inside its own forward, with its weights, which the folder does not hold
    for `generate` to call: refused."""
    if multimodal_parts(model):
        raise Unsupported(
            f"hfx generate: {type(model).__name__} generates from images or audio through "
            f"{', '.join(runners)}; hfx generate runs text models"
        )
    if "decode" not in runners or not ({"prefill", "encoder"} & set(runners)):
        raise Unsupported(
            f"hfx generate: the folder's components are {', '.join(runners)}, not a "
            "generation export's (prefill and decode): export it with "
            "`hfx run --generation -o DIR`"
        )
    encoder = generated_encoder(model)
    return {name: encoder if name == "encoder" else model for name in runners}


def generated_ids(model, prompt, sequences):
    """The tokens `generate` added to one prompt: after the prompt, or for an
    encoder-decoder after the decoder's start token."""
    start = (
        1 if getattr(model.config, "is_encoder_decoder", False) else prompt["input_ids"].shape[1]
    )
    return [int(t) for t in sequences[0, start:]]


def tokens_of(tokenizer, ids):
    return GeneratedTokens(
        ids=ids,
        pieces=[tokenizer.decode([i]) for i in ids],
        text=tokenizer.decode(ids, skip_special_tokens=True),
    )


def TextSent(tokenizer, channel):
    """A transformers `TextStreamer` that sends each finished piece of text
    to the host instead of printing it (the prompt's tokens skipped)."""
    from transformers import TextStreamer

    class Sent(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            if text:
                channel.generated(text)

    return Sent(tokenizer, skip_prompt=True, skip_special_tokens=True)
