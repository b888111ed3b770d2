"""The worker's classification of failures the user's input caused
(`hfx_worker/errors.py`): each known failure becomes one line naming the
input and the fix; a failure of hfx itself is not classified.

    python check_user_errors.py DIR    # DIR: a scratch folder

Exits non-zero with one line per failure.
"""

import os
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
sys.path.insert(0, WORKER)

from hfx_worker import checkpoint, errors, sandbox, sources  # noqa: E402

failures = []


def classified(call, step="build"):
    """The protocol's `UserError` for what `call` raises (None: not the input's fault)."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - classified below
        return errors.classify(error, step)
    failures.append(f"{call}: raised nothing")
    return None


def expect(name, user, kind, *says):
    if user is None:
        failures.append(f"{name}: not classified")
    elif user.kind != kind or "\n" in user.line or not all(s in user.line for s in says):
        failures.append(f"{name}: {user.kind}: {user.line!r}; expected {kind} saying {says}")


def main(scratch):
    import transformers

    expect(
        "unknown architecture",
        classified(lambda: sources.from_architecture("lama", {}, None)),
        "unknown_architecture",
        "--model lama",
        "`llama`",
    )
    expect(
        "unknown config key, close",
        classified(lambda: sources.checked_overrides("llama", {"num_hiden_layers": "1"})),
        "unknown_config_key",
        "--set num_hiden_layers",
        "did you mean `num_hidden_layers`",
    )
    expect(
        "unknown config key, far",
        classified(lambda: sources.checked_overrides("llama", {"foo_bar": "3"})),
        "unknown_config_key",
        "LlamaConfig has no `foo_bar`",
        "hidden_size",
    )
    # Keys a config takes without holding them by default: read by modeling
    # code (`head_dim`, `decoder_start_token_id`) or popped by the base
    # config (`experts_implementation`).
    for arch, key in [
        ("qwen3_moe", "head_dim"),
        ("qwen3_moe", "experts_implementation"),
        ("t5", "decoder_start_token_id"),
    ]:
        try:
            sources.checked_overrides(arch, {key: "8"})
        except Exception as error:  # noqa: BLE001
            failures.append(f"--set {key} for {arch} refused: {error}")
    config = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=4)
    expect(
        "unknown task",
        classified(lambda: sources.model_class("AutoModelForCasualLM", config)),
        "unknown_task",
        "--task AutoModelForCasualLM",
        "`AutoModelForCausalLM`",
    )
    expect(
        "a config transformers refuses",
        classified(
            lambda: sources.from_architecture(
                "llama", {"hidden_size": "30", "num_attention_heads": "4"}, None
            )
        ),
        "model",
        "while building it",
        "hidden size (30)",
        "--set",
    )
    # A truncated checkpoint, read by the streamed path and by transformers' loader.
    folder = os.path.join(scratch, "truncated")
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    weights = os.path.join(folder, "model.safetensors")
    os.truncate(weights, os.path.getsize(weights) // 2)
    expect(
        "truncated checkpoint",
        classified(lambda: checkpoint.checkpoint_tensors(folder)),
        "truncated_file",
        weights,
        "truncated",
    )
    expect(
        "truncated checkpoint, loaded",
        classified(lambda: sources.from_directory(folder, None, False)),
        "truncated_file",
        weights,
    )
    expect(
        "a path the patch sandbox refuses",
        classified(lambda: sandbox.Reach().resolve("os.system"), "export"),
        "sandbox_refusal",
        "os.system",
        "fix or drop the plugin",
    )
    expect(
        "a file that is not there",
        classified(lambda: open(os.path.join(scratch, "absent.json"))),
        "missing_file",
        "absent.json",
    )
    expect(
        "a --model-fn module that is not there",
        classified(lambda: sources.from_function("python:no_such_module_here:f")),
        "missing_file",
        "--model-fn python:no_such_module_here:f",
        "no module `no_such_module_here`",
    )
    expect(
        "a --model-fn function that is not there",
        classified(lambda: sources.from_function("python:json:no_such_function")),
        "missing_file",
        "the module `json` has no function `no_such_function`",
    )
    import torch

    if not torch.cuda.is_available():
        expect(
            "--device cuda without a GPU",
            classified(lambda: sources.prepared(torch.nn.Linear(2, 2), "cuda", "float32")),
            "unsupported_option",
            "--device cuda",
            "drop --device",
        )
    # Failures of hfx or its upstreams keep their traceback: past `build`
    # the files and inputs are hfx's.
    bad_config = lambda: sources.from_architecture(  # noqa: E731
        "llama", {"hidden_size": "30", "num_attention_heads": "4"}, None
    )
    for name, call, step in [
        ("a bug", lambda: [][1], "build"),
        ("an OS refusal", lambda: open("/proc/1/mem", "w"), "build"),
        ("a ValueError outside transformers", lambda: int("x"), "build"),
        ("a transformers refusal while running hfx's inputs", bad_config, "eager"),
        ("a scratch file missing", lambda: open(os.path.join(scratch, "absent")), "lower"),
    ]:
        user = classified(call, step)
        if user is not None:
            failures.append(f"{name}: classified as {user}")


if __name__ == "__main__":
    main(sys.argv[1])
    for failure in failures:
        print(failure)
    sys.exit(1 if failures else 0)
