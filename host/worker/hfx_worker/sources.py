"""Where the model comes from, the inputs it is traced with, and the backend's
device and dtype. Runs model code (`from_function`, custom code in a model
folder): as trusted as the user trusts it."""

import contextlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys

from .errors import UserInputError, nearest

# The seed of random weights and generated inputs (a rebuilt model matches the traced one).
SEED = 0
# The sizes of `verify`'s second inputs for a dynamic export: batch and
# sequence other than the trace's defaults.
SECOND_BATCH, SECOND_SEQUENCE = 3, 5

# ── Model sources ──


def parse_value(text):
    """`--set` values: JSON where it parses (ints, floats, bools, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def from_architecture(arch, overrides, task, generative=False):
    """A random model of `arch`: the `--task` class, else for generation the
    architecture's generative class, else its causal LM (decoder-only
    families) or base model."""
    import transformers

    config = transformers.AutoConfig.for_model(
        arch, **{k: parse_value(v) for k, v in checked_overrides(arch, overrides).items()}
    )
    # A config made here names no code to fetch: an `auto_map` set by `--set`
    # (or a self-test case's overrides) is never followed.
    if task:
        cls = model_class(task, config)
        return built(cls, config, **remote_refused(cls))
    if generative:
        auto = generative_class(config)
        if auto is not None:
            return auto.from_config(config, trust_remote_code=False)
        from .protocol import Unsupported

        raise Unsupported(
            f"--generation: transformers has no generative class for `{arch}`; name one with --task"
        )
    auto = transformers.AutoModelForCausalLM if arch in CAUSAL_LM else transformers.AutoModel
    return auto.from_config(config, trust_remote_code=False)


def config_class(arch):
    """The config class of the model type `arch`; an unknown type is the user's error."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if arch not in CONFIG_MAPPING:
        raise UserInputError(
            "unknown_architecture",
            f"--model {arch}: transformers {transformers.__version__} knows no model type `{arch}`"
            f"{nearest(arch, CONFIG_MAPPING.keys())} (a model type as config.json's `model_type` names it)",
        )
    return CONFIG_MAPPING[arch]


def config_keys(arch, cls):
    """What `--set` may name for a config of class `cls`: its attributes and
    their aliases (`attribute_map`), the arguments its constructor takes, and
    what the modeling code of `arch` reads from a config that need not be
    there (`getattr(config, "head_dim", ...)`); None where the class has no
    default config to read them from (the keys are then not checked)."""
    try:
        defaults = cls()
    except Exception:  # noqa: BLE001 - a config that needs arguments: for_model says what it lacks
        return None
    keys = {key for key in vars(defaults) if not key.startswith("_")}
    keys |= {key for key in dir(cls) if isinstance(getattr(cls, key), property)}
    keys |= set(getattr(cls, "attribute_map", {}))
    keys |= set(signature_keys(cls))
    sources = {
        inspect.getsourcefile(base)
        for base in cls.__mro__
        if base.__module__.startswith("transformers")
    }
    kind = arch.replace("-", "_")
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec(f"transformers.models.{kind}.modeling_{kind}")
        if spec is not None and spec.origin:
            sources.add(spec.origin)
    for source in sources - {None}:
        with open(source, encoding="utf-8") as f:
            keys |= {key for match in CONFIG_READ.findall(f.read()) for key in match if key}
    return keys


def listed(names, most=24):
    """`names` joined by commas, the first `most` of them (a line, not a page)."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def own_keys(cls):
    """The constructor arguments of the config class `cls` that every
    config does not share, in its order (the sizes first, as configs declare them)."""
    from transformers import PretrainedConfig

    shared = set(signature_keys(PretrainedConfig))
    return [name for name in signature_keys(cls) if name not in shared]


def signature_keys(cls):
    """The arguments the config class `cls`'s own constructor names, in its
    order (the sizes first, as configs declare them)."""
    names = inspect.signature(cls.__init__).parameters
    return [name for name in names if name not in ("self", "args", "kwargs")]


# A config key read where it need not be set: `kwargs.pop("key"` in a
# config's constructor, `getattr(config, "key"` or `config.key` in modeling
# code (T5 reads `config.decoder_start_token_id`, which its config sets only
# when given).
CONFIG_READ = re.compile(
    r"""(?:kwargs\.(?:pop|get)|getattr\(\s*(?:self\.)?config\s*,)\s*\(?\s*["'](\w+)["']"""
    r"""|\bconfig\.([a-z]\w*)\b(?!\s*\()"""
)


def checked_overrides(arch, overrides):
    """`overrides` (`--set`), each a key the config of `arch` has; another key is the user's error."""
    cls = config_class(arch)
    if overrides:
        keys = config_keys(arch, cls)
        for key in overrides:
            if keys is not None and key not in keys:
                said = nearest(key, keys) or "; its own keys: " + listed(own_keys(cls))
                raise UserInputError(
                    "unknown_config_key", f"--set {key}=...: {cls.__name__} has no `{key}`{said}"
                )
    return overrides


def remote_refused(cls):
    """`trust_remote_code=False` for an auto class (a model class takes no such option)."""
    import transformers

    return (
        {"trust_remote_code": False}
        if isinstance(cls, type)
        and issubclass(cls, transformers.models.auto.auto_factory._BaseAutoModelClass)
        else {}
    )


# The auto classes of models that generate, in the order a generation export picks one.
GENERATIVE = (
    "AutoModelForCausalLM",
    "AutoModelForSeq2SeqLM",
    "AutoModelForSpeechSeq2Seq",
    "AutoModelForImageTextToText",
    "AutoModelForVision2Seq",
)


def generative_class(config):
    """The auto class that generates with a model of `config`, or None. An
    encoder-decoder generates with its whole model (a model folder's
    `architectures` names that class), not its decoder alone
    (`WhisperForCausalLM`), which the causal LM class would pick first."""
    import transformers

    order = (
        sorted(GENERATIVE, key=lambda name: "Seq2Seq" not in name)
        if getattr(config, "is_encoder_decoder", False)
        else GENERATIVE
    )
    for name in order:
        auto = getattr(transformers, name, None)
        if auto is not None and type(config) in auto._model_mapping:
            return auto
    return None


def model_class(task, config):
    """`--task`: a transformers class (`BertModel`), a dotted path (the user's
    own: a self-test case's task is a plain name, the host refuses others), or a
    class of the architecture's modeling module (`WhisperEncoder`). A plain name
    must be a model class (a `PreTrainedModel` or an auto model class) found at
    its home under its name: never a function (`pipeline`) nor a loader."""
    import transformers

    if "." in task:
        module, name = task.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)
    if task.isidentifier() and not task.startswith("_") and task in dir(transformers):
        return checked_model_class(task, getattr(transformers, task))
    kind = config.model_type.replace("-", "_")
    module = importlib.import_module(f"transformers.models.{kind}.modeling_{kind}")
    if task.isidentifier() and not task.startswith("_") and task in vars(module):
        return checked_model_class(task, vars(module)[task])
    classes = [name for name in dir(transformers) if name.startswith("AutoModel")]
    classes += [
        name
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, transformers.PreTrainedModel)
    ]
    raise UserInputError(
        "unknown_task",
        f"--task {task}: not a transformers model class, nor one of transformers.models.{kind}"
        f"{nearest(task, classes)} (--task names the class to build: AutoModelForCausalLM, "
        f"{type(config).__name__.removesuffix('Config')}Model, ...)",
    )


def checked_model_class(task, cls):
    """`cls` if it is a model class found again at its home (by identity), else refused."""
    import transformers
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    at_home = module is not None and vars(module).get(getattr(cls, "__name__", None)) is cls
    if not (
        isinstance(cls, type)
        and issubclass(cls, (transformers.PreTrainedModel, _BaseAutoModelClass))
        and at_home
    ):
        raise UserInputError("unknown_task", f"--task {task}: not a transformers model class")
    return cls


def built(cls, config, **kwargs):
    """A model of class `cls` from `config`: auto classes have `from_config`, models `_from_config`."""
    if hasattr(cls, "from_config"):
        return cls.from_config(config, **kwargs)
    return cls._from_config(config) if hasattr(cls, "_from_config") else cls(config)


# The names configs give their number of layers.
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def truncated(config, layers):
    """`config` with only its first `layers` layers: each layer count cut, and
    every per-layer list (`layer_types`) with it."""
    counts = [key for key in LAYER_COUNTS if isinstance(getattr(config, key, None), int)]
    if not counts:
        raise ValueError(
            f"--verify-layers: {type(config).__name__} names no layer count ({', '.join(LAYER_COUNTS)})"
        )
    for key in counts:
        count = getattr(config, key)
        if layers < count:
            for name, value in list(vars(config).items()):
                if isinstance(value, list) and len(value) == count:
                    setattr(config, name, value[:layers])
            setattr(config, key, layers)
    return config


def directory_class(path, task, trust_remote_code, layers=None):
    """A model folder's class and config (`layers`: truncated to its first N):
    the `--task` class, else the one `architectures` names. `trust_remote_code`
    is always passed as a bool: left unset, transformers would ask on stdin
    (the protocol's) whether to run a folder's own code."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    if layers is not None:
        config = truncated(config, layers)
    if task:
        return model_class(task, config), config
    names = getattr(config, "architectures", None) or []
    auto_map = getattr(config, "auto_map", None)
    if names and auto_map and not hasattr(transformers, names[0]):
        return remote_auto_class(auto_map, names[0]), config
    return (getattr(transformers, names[0]) if names else transformers.AutoModel), config


def from_directory(path, task, trust_remote_code, layers=None):
    """A model folder's model (its first `layers` layers), its weights loaded."""
    from .checkpoint import check_complete

    cls, config = directory_class(path, task, trust_remote_code, layers)
    options = {"trust_remote_code": trust_remote_code}
    if layers is not None:
        options["config"] = config
    try:
        return cls.from_pretrained(path, **options)
    except Exception:
        check_complete(path)  # a truncated file is said as such, not as the loader's failure
        raise


def streamed_from_directory(path, task, trust_remote_code, dtype, layers=None, weights_dtype=None):
    """A model folder's model (its first `layers` layers) with its weights
    left in the checkpoint (`checkpoint.StreamedModel`), or None and why they
    cannot be; `weights_dtype` as `prepared` takes it."""
    from .checkpoint import streamed_model

    cls, config = directory_class(path, task, trust_remote_code, layers)
    options = {"trust_remote_code": trust_remote_code} if hasattr(cls, "from_config") else {}
    return streamed_model(lambda: built(cls, config, **options), path, dtype, weights_dtype)


def remote_auto_class(auto_map, architecture):
    """The auto class that loads a folder's own model class `architecture`: the `auto_map`
    entry naming it (`"AutoModelForCausalLM": "modeling_x.XForCausalLM"`), else `AutoModel`."""
    import transformers

    for auto, reference in auto_map.items():
        # `module.Class`, or `org/repo--module.Class` for code kept in another repo.
        target = reference[0] if isinstance(reference, (list, tuple)) else reference
        if (
            auto.startswith("AutoModel")
            and isinstance(target, str)
            and target.rsplit(".", 1)[-1] == architecture
            and hasattr(transformers, auto)
        ):
            return getattr(transformers, auto)
    return transformers.AutoModel


def from_function(spec):
    # python:module:function returning (model, inputs)
    _, module, function = spec.split(":", 2)
    # The folder comes last: a `json.py` there cannot shadow the standard library or site-packages.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module.split(".")[0] and error.name != module:
            raise  # the module is there, and imports one that is not: its own failure
        raise UserInputError(
            "missing_file",
            f"--model-fn {spec}: no module `{module}` in the current folder or on PYTHONPATH",
        ) from error
    if not callable(getattr(found, function, None)):
        raise UserInputError(
            "missing_file", f"--model-fn {spec}: the module `{module}` has no function `{function}`"
        )
    return getattr(found, function)()


CAUSAL_LM = {"llama", "qwen2", "qwen3", "gpt2", "mistral", "phi3", "gemma", "gemma2", "olmo"}


# ── Sample inputs ──


def sample_inputs(model, batch, sequence, image_size=None):
    """Inputs for the architecture; every axis meant to be dynamic has size >= 2
    (torch specializes sizes 0 and 1). Images are square, of the config's
    size unless `image_size` is given."""
    import torch

    config = model.config
    generator = torch.Generator().manual_seed(0)
    main = getattr(model, "main_input_name", "input_ids")
    vocab = getattr(config, "vocab_size", 1000)
    if main == "input_features":
        # Speech encoders take log-mel frames; their length is fixed by the model (2 x positions).
        frames = 2 * getattr(config, "max_source_positions", 1500)
        inputs = {
            "input_features": torch.randn(batch, config.num_mel_bins, frames, generator=generator)
        }
    elif main == "pixel_values":
        size = image_size or getattr(config, "image_size", 224)
        channels = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn(batch, channels, size, size, generator=generator)}
    else:
        ids = torch.randint(0, vocab, (batch, sequence), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones(batch, sequence, dtype=torch.long)}
    # An encoder-decoder's decoder takes a prompt of its own (a speech model's
    # too): without one its forward has nothing to decode, and `generate`
    # starts from the one start token, a cache length torch.export specializes.
    # Its encoder alone (`WhisperEncoder`, same config) takes none.
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in forward_parameters(
        model
    ):
        inputs["decoder_input_ids"] = torch.randint(
            0, vocab, (batch, sequence), generator=generator
        )
    return inputs


def other_image_size(config):
    """An image size other than the config's that a patch embedding still
    divides into whole patches (two patches more a side; 8 pixels where the
    config has no patch size), else None where the config's is not one int."""
    size = getattr(config, "image_size", 224)
    patch = getattr(config, "patch_size", 8)
    if isinstance(patch, (list, tuple)):
        patch = math.lcm(*patch) if patch and all(isinstance(p, int) for p in patch) else None
    if not isinstance(size, int) or isinstance(size, bool) or not isinstance(patch, int):
        return None
    return size + 2 * patch


def forward_parameters(model):
    """The names `model`'s forward takes."""
    return inspect.signature(model.forward).parameters


# ── Backend preparation: device and dtype ──


def prepared(model, device, dtype_name, weights_dtype_name=None, streamed=False):
    """The model on the backend's device, in its dtype (cpu/float32 unless asked).

    With `weights_dtype_name`, its floating parameters and buffers hold the
    values they would in that dtype (rounded to it) while it computes in
    `dtype`: the reference's OpenVINO export of a 16-bit model, which traces
    it in float32 activations over its 16-bit weights (`patch_16bit_model`).
    `streamed`: the parameters are a streamed model's, whose checkpoint holds
    them in that dtype already (`checkpoint.streamed_model`), so they are left
    unread; its buffers are rounded."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(
            "unsupported_option",
            f"--device {device}: this torch sees no CUDA device: trace on the CPU (drop --device)",
        )
    dtype = floating_dtype(dtype_name)
    model = model.to(device=device, dtype=dtype)
    if weights_dtype_name is not None:
        weights_dtype = floating_dtype(weights_dtype_name)
        tensors = list(model.buffers())
        if not streamed:
            tensors += list(model.parameters())
        with torch.no_grad():
            for tensor in tensors:
                if tensor.is_floating_point():
                    tensor.copy_(tensor.to(weights_dtype))
    return model, device, dtype


def floating_dtype(name):
    """The torch dtype `--dtype` names."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise UserInputError(
            "unsupported_option",
            f"--dtype {name}: not a floating torch dtype (float32, float16, bfloat16)",
        )
    return dtype


def on_device(value, device, dtype):
    """Input tensors follow the model: floating ones take its dtype, all its device."""
    import torch

    if not torch.is_tensor(value):
        return value
    return value.to(device=device, dtype=dtype) if value.is_floating_point() else value.to(device)


def builds_non_causal_attention(config):
    """Whether `config` or one of its sub-configs asks for attention modules
    built non-causal (`use_bidirectional_attention`, the Gemma family's key:
    PaliGemma's default) while masks stay causal (`is_causal`, the switch of
    transformers' mask helpers, not False)."""
    if config is None:
        return False
    asks = getattr(config, "use_bidirectional_attention", None) in (True, "all")
    if asks and getattr(config, "is_causal", True) is not False:
        return True
    return any(
        builds_non_causal_attention(getattr(config, key, None))
        for key in getattr(config, "sub_configs", {})
    )


def attention_implementations(config):
    """`config`'s attention implementation and its sub-configs', in the form
    `set_attn_implementation` takes back."""
    inner = {
        key: attention_implementations(getattr(config, key))
        for key in getattr(config, "sub_configs", {})
        if getattr(config, key, None) is not None
    }
    return {"": config._attn_implementation, **inner} if inner else config._attn_implementation


@contextlib.contextmanager
def reference_attention(model):
    """The attention the eager reference runs: transformers' eager attention
    where the model builds its attention non-causal while its masks are
    causal (`builds_non_causal_attention`), its own otherwise. SDPA drops
    an all-ones mask in eager (never under torch.export) and then relies on
    the module's `is_causal`: such a model's SDPA attends both ways over the
    whole sequence, whatever mask the model built, while its eager attention
    (and its SDPA on a padded batch) applies the mask, as the traced program
    does. A model that builds a bidirectional mask there too (EmbeddingGemma)
    computes the same either way."""
    config = getattr(model, "config", None)
    if not builds_non_causal_attention(config) or not hasattr(model, "set_attn_implementation"):
        yield
        return
    saved = attention_implementations(config)
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(saved)


@contextlib.contextmanager
def config_flags(model, flags):
    """Output flags (`use_cache`, ...) become config values for the trace, not traced inputs."""
    config = getattr(model, "config", None)
    saved = [
        (k, getattr(config, k)) for k, v in flags.items() if v is not None and hasattr(config, k)
    ]
    for key, _ in saved:
        setattr(config, key, flags[key])
    try:
        yield
    finally:
        for key, value in saved:
            setattr(config, key, value)
