"""The worker's `quantizers.import_for`: transformers' quantizers imported
without the quantization libraries a model does not use, and as transformers
imports them for a model that does.

    python check_quantizers.py            # the checks (each case in a fresh process)
    python check_quantizers.py --case NAME

Exits non-zero with one line per failure.
"""

import json
import os
import subprocess
import sys
import tempfile

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "host", "worker")
sys.path.insert(0, WORKER)


def quantizer_names():
    """The names transformers' torchao quantizer module holds."""
    return sorted(vars(sys.modules["transformers.quantizers.quantizer_torchao"]))


def case(name):
    """One case, in this (fresh) process; prints what it saw as JSON."""
    import torch  # noqa: F401 - as the worker has it before a model is built
    from hfx_worker import quantizers

    seen = {}
    if name == "upstream":  # transformers alone
        import transformers

        transformers.LlamaForCausalLM  # noqa: B018
    elif name == "unquantized":
        quantizers.import_for(None)
        import transformers

        transformers.LlamaForCausalLM  # noqa: B018
        seen["torchao_imported"] = "torchao" in sys.modules
        seen["available_after"] = transformers.utils.import_utils.is_torchao_available()
        import torchao  # noqa: F401 - importable again: a model's own code may import it

        seen["importable_after"] = True
    elif name == "torchao":
        quantizers.import_for("torchao")
        seen["torchao_imported"] = "torchao" in sys.modules
    elif name == "unquantized-then-torchao":
        quantizers.import_for(None)
        quantizers.import_for("torchao")
        from torchao.quantization import Int8WeightOnlyConfig
        from transformers import TorchAoConfig
        from transformers.quantizers.auto import AutoHfQuantizer

        quantizer = AutoHfQuantizer.from_config(TorchAoConfig(Int8WeightOnlyConfig()))
        seen["quantizer"] = type(quantizer).__name__
    seen["names"] = quantizer_names()
    print(json.dumps(seen))


def run(name):
    done = subprocess.run(
        [sys.executable, __file__, "--case", name], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"case `{name}` failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    from hfx_worker import quantizers

    failures = []
    upstream, unquantized, torchao, later = (
        run(n) for n in ("upstream", "unquantized", "torchao", "unquantized-then-torchao")
    )
    if unquantized["torchao_imported"]:
        failures.append("an unquantized model's build imported torchao")
    if not unquantized["available_after"] or not unquantized.get("importable_after"):
        failures.append(
            "torchao was not available again after the quantizers were imported without it"
        )
    if not torchao["torchao_imported"]:
        failures.append("a torchao-quantized model's build did not import torchao")
    for label, seen in (("torchao", torchao), ("unquantized-then-torchao", later)):
        if seen["names"] != upstream["names"]:
            missing = sorted(set(upstream["names"]) - set(seen["names"]))
            failures.append(
                f"{label}: the torchao quantizer module lacks {missing} that transformers' own import gives it"
            )
    if later.get("quantizer") != "TorchAoHfQuantizer":
        failures.append(
            f"a torchao config after an unquantized model gave the quantizer {later.get('quantizer')}"
        )
    if set(unquantized["names"]) >= set(upstream["names"]):
        failures.append(
            "the torchao quantizer module imported without torchao holds all it holds with it: the check proves nothing"
        )

    with tempfile.TemporaryDirectory() as folder:
        for config, expected in (
            ({"model_type": "llama"}, None),
            (
                {
                    "model_type": "llama",
                    "quantization_config": {"quant_method": "torchao", "quant_type": {}},
                },
                "torchao",
            ),
            ({"model_type": "llama", "quantization_config": {"quant_method": 3}}, None),
            ([1, 2], None),
        ):
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(config, f)
            if quantizers.folder_method(folder) != expected:
                failures.append(
                    f"folder_method of {config} is {quantizers.folder_method(folder)!r}, expected {expected!r}"
                )
        os.remove(os.path.join(folder, "config.json"))
        if quantizers.folder_method(folder) is not None:
            failures.append("folder_method of a folder without config.json is not None")

    for failure in failures:
        print(failure, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--case"]:
        case(sys.argv[2])
    else:
        main()
