"""Checks an hfx `--generation` export folder against the reference.

    python check_generation_folder.py FOLDER ATOL [--multi-token-decode]
        [--model-fn MODULE:FUNCTION | --model-dir MODEL_FOLDER] [--processor]

The reference's own `decompose_for_generation` (transformers 5.24,
unchanged) captures the components of the same model (rebuilt from the
folder's config with the seed hfx builds random models with, or loaded
from the model folder hfx exported) from the same
sample inputs hfx generates, with the folder's generation config (a static
cache's length), the first row left-padded as hfx pads it. Then:
- the components are the same, in the same order, traced with the same kwargs
  (a multimodal model: hfx's hold the reference's, plus the encoders and
  projector 5.24's `generate` runs before the forward the reference captures;
  an encoder-decoder: plus its encoder, likewise);
- an ONNX component's inputs and outputs carry the reference's names (leaf
  paths, `input.`/`output.` where both sides have one);
- `ExportedModel.from_pretrained(FOLDER)` loads every component (OpenVINO
  IR on the CPU in float32), and each,
  run by the reference's runner on the reference's captured kwargs, returns
  the module's output type with its first output (the logits, a part's
  hidden states) within ATOL of eager's;
- with `--processor`, the tokenizer and feature extractor load from FOLDER.
"""

import copy
import importlib
import os
import sys

import torch
import transformers
from transformers.exporters import ExportedModel
from transformers.exporters.utils import (
    decompose_for_generation,
    disambiguate_io_names,
    get_leaf_tensors,
)

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
)
from hfx_worker import pytree, sources  # noqa: E402
from hfx_worker.generation import PROJECTORS, left_padded  # noqa: E402

FLAGS = ("use_cache", "output_attentions", "output_hidden_states", "return_dict", "return_loss")


def main(folder, atol, *options):
    atol = float(atol)
    if "--processor" in options:
        # What turns text and audio into the model's inputs loads from the export folder.
        transformers.AutoTokenizer.from_pretrained(folder)
        transformers.AutoFeatureExtractor.from_pretrained(folder)
        print("ok: the tokenizer and the feature extractor load from the folder")
    # OpenVINO on the CPU at the precision hfx's IR records (float32): OpenVINO
    # 2026.3 leaves it to the caller, and would run bfloat16 where the CPU has it.
    runner = {}
    if any(name.startswith("openvino_") for name in os.listdir(folder)):
        runner = {"device": "cpu", "config": {"INFERENCE_PRECISION_HINT": "f32"}}
    exported = ExportedModel.from_pretrained(folder, trust_remote_code=True, **runner)
    pytree.register_cache_pytrees()
    function = options[options.index("--model-fn") + 1] if "--model-fn" in options else None
    if function:  # the model function hfx traced, and its inputs
        module, name = function.split(":")
        model, inputs = getattr(importlib.import_module(module), name)()
        model = model.eval()
    elif "--model-dir" in options:  # the model folder hfx exported, its weights loaded
        model_dir = options[options.index("--model-dir") + 1]
        model = sources.from_directory(model_dir, None, False).eval()
    else:
        torch.manual_seed(0)  # hfx's seed for a random model
        model = sources.generative_class(exported.config).from_config(exported.config).eval()
    try:
        model.set_attn_implementation("sdpa")  # as hfx traces, where the model has it
    except ValueError:
        pass
    if not function:
        inputs = left_padded(model, sources.sample_inputs(model, 2, 8))
    generation = transformers.GenerationConfig.from_pretrained(folder)
    with torch.no_grad():
        components = decompose_for_generation(
            model,
            inputs,
            generation_config=generation,
            multi_token_decode="--multi-token-decode" in options,
        )
    ours = list(exported.components)
    extra = [name for name in ours if name not in components]
    if [name for name in ours if name in components] != list(components) and sorted(ours) != sorted(
        components
    ):
        raise SystemExit(f"components {ours}, the reference's {list(components)}")
    # hfx's components beyond the reference's: a multimodal prefill's
    # encoders and projector, an encoder-decoder's encoder (`generate` runs
    # them before the forward the reference captures).
    multimodal = ("image_encoder", "audio_encoder", *PROJECTORS)
    if (
        any(name not in (*multimodal, "encoder") for name in extra)
        or (any(name in multimodal for name in extra) and "language_model" not in ours)
        or ("encoder" in extra and "prefill" not in ours)
    ):
        raise SystemExit(f"components {ours}: {extra} beyond the reference's {list(components)}")
    for name, (module, kwargs) in components.items():
        kwargs = {k: v for k, v in kwargs.items() if k not in FLAGS}
        metadata = exported.components[name].metadata
        if list(metadata.kwargs) != list(kwargs):
            raise SystemExit(
                f"{name}: traced with {list(metadata.kwargs)}, the reference's capture has {list(kwargs)}"
            )
        with torch.no_grad():
            eager = module(**copy.deepcopy(kwargs))
        if exported.export_format == "onnx":
            session = exported.runners[name].session
            inputs_names = list(get_leaf_tensors(kwargs))
            outputs_names = list(get_leaf_tensors(eager))
            want_in, want_out = disambiguate_io_names(inputs_names, outputs_names)
            got_in = [i.name for i in session.get_inputs()]
            got_out = [o.name for o in session.get_outputs()]
            # The export prunes inputs the graph does not read (as the reference's does).
            if [n for n in want_in if n in got_in] != got_in or got_out[
                -len(want_out) :
            ] != want_out:
                raise SystemExit(
                    f"{name}: inputs {got_in} outputs {got_out}; the reference names {want_in} and {want_out}"
                )
        got = exported.runners[name](**copy.deepcopy(kwargs))
        if type(got) is not type(eager):
            raise SystemExit(
                f"{name}: returns a {type(got).__name__}, the model a {type(eager).__name__}"
            )
        # The main output: logits, a part's hidden states, an encoder's features.
        got_main, eager_main = pytree.flat_outputs(got)[0], pytree.flat_outputs(eager)[0]
        # Eager's sliding-window cache holds the window, the exported decode
        # the whole sequence (the window applied by its mask): a left-padded
        # row's window then starts elsewhere, by design. Those rows are the
        # generation check's (`--verify`), which runs the components' own cache.
        cache = kwargs.get("cache")
        layers = getattr(getattr(cache, "self_attention_cache", cache), "layers", [])
        mask = kwargs.get("attention_mask")
        if any(getattr(layer, "is_sliding", False) for layer in layers) and torch.is_tensor(mask):
            whole = mask.reshape(mask.shape[0], -1).bool().all(-1)
            got_main, eager_main = got_main[whole], eager_main[whole]
        if got_main.shape != eager_main.shape or not torch.allclose(
            got_main.float(), eager_main.float(), atol=atol, rtol=atol
        ):
            raise SystemExit(f"{name}: its first output differs from eager's")
        print(f"ok: {name} ({type(got).__name__}, {len(list(kwargs))} kwargs)")


if __name__ == "__main__":
    main(*sys.argv[1:])
