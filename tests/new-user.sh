#!/usr/bin/env bash
# A new user's first session with an installed hfx, in an empty folder with
# no checkout on any path: a model folder to ONNX run at batch 1 after a
# batch-2 trace, a third-party plugin from `hfx plugins new` to
# `hfx run --plugins`, a Whisper folder exported for generation, and five
# bad inputs each answered by exactly one line on stderr (and nothing
# written).
#
# Usage: tests/new-user.sh PREFIX, where `cargo xtask install --prefix PREFIX`
# installed hfx (tests/it/install.rs runs it against its installation).
set -euo pipefail

prefix=$(cd "$1" && pwd)
hfx="$prefix/bin/hfx"
python="$prefix/share/hfx/venv/bin/python"
unset HFX_PYTHON
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

step() { printf '\n== %s\n' "$*"; }
fail() {
    printf 'new-user: %s\n' "$*" >&2
    exit 1
}

step "model folders, as save_pretrained writes them"
"$python" - <<'EOF'
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

torch.manual_seed(0)
llama = LlamaConfig(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
LlamaForCausalLM(llama).eval().save_pretrained("llama")
whisper = WhisperConfig(
    vocab_size=128,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    num_mel_bins=16,
    max_source_positions=16,
    max_target_positions=32,
    decoder_start_token_id=1,
    pad_token_id=0,
    eos_token_id=2,
)
WhisperForConditionalGeneration(whisper).eval().save_pretrained("whisper")
EOF

step "a model folder to ONNX (traced at batch 2), run at batch 1 in ONNX Runtime"
"$hfx" run --backend onnx --model-dir llama --verify -o llama-onnx/
"$python" - <<'EOF'
import numpy as np
import onnxruntime as ort
import torch
from transformers import LlamaForCausalLM

session = ort.InferenceSession("llama-onnx/model.onnx")
ids = np.array([[5, 17, 3, 99, 42, 7, 1]], dtype=np.int64)
feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
wanted = {i.name for i in session.get_inputs()}
logits = session.run(None, {k: v for k, v in feed.items() if k in wanted})[0]
with torch.no_grad():
    eager = LlamaForCausalLM.from_pretrained("llama").eval()(torch.from_numpy(ids)).logits
assert logits.shape == tuple(eager.shape), (logits.shape, eager.shape)
error = float(np.abs(logits - eager.numpy()).max())
assert error < 1e-3, error
print(f"batch 1 x 7 in ONNX Runtime: logits {logits.shape}, max abs error {error:.1e}")
EOF

step "a third-party plugin: new, build, test, lock, run"
"$hfx" plugins new my-fix --kind fx-node-fix
"$hfx" plugins build my-fix
"$hfx" plugins test my-fix
"$hfx" plugins lock --plugins my-fix -o my-fix.lock
"$hfx" run --backend onnx --plugins my-fix --lock my-fix.lock --locked --model-dir llama -o llama-fixed.onnx \
    --report run.json
test -s llama-fixed.onnx || fail "no llama-fixed.onnx"
# The plugin was part of the run's set (it acts where a trace has a `detach`).
"$python" - <<'EOF'
import json

run = json.load(open("run.json"))
plugins = {p["name"]: p for p in run["plugin_set"]["plugins"]}
assert "my-fix" in plugins, sorted(plugins)
assert run["plugin_set"]["lock"]["status"] == "matched", run["plugin_set"]["lock"]
print("my-fix in the run's locked set:", plugins["my-fix"]["kind"])
EOF

step "a Whisper folder for generation, greedy tokens checked against eager generate"
"$hfx" run --backend onnx --model-dir whisper --generation --verify -o whisper-onnx/

step "bad inputs: one line on stderr each, nothing written"
mkdir truncated
cp llama/config.json truncated/
head -c 4096 llama/model.safetensors >truncated/model.safetensors
one_line() {
    local expect=$1
    shift
    if "$hfx" "$@" >stdout.txt 2>stderr.txt; then
        fail "hfx $* succeeded"
    fi
    [ "$(wc -l <stderr.txt)" = 1 ] || {
        cat stderr.txt >&2
        fail "hfx $*: $(wc -l <stderr.txt) lines on stderr, not one"
    }
    grep -qi -- "$expect" stderr.txt || fail "hfx $*: the line does not say \`$expect\`: $(cat stderr.txt)"
    [ ! -e bad.onnx ] || fail "hfx $* wrote bad.onnx"
    cat stderr.txt
}
one_line truncated run --backend onnx --model-dir truncated -o bad.onnx
one_line "did you mean" run --backend onnx --model lama -o bad.onnx
one_line text-generation-with-past run --backend onnx --model-dir llama \
    --task text-generation-with-past -o bad.onnx
one_line banana run --backend onnx --model-dir llama --dynamic-shapes banana -o bad.onnx
one_line foo_bar run --backend onnx --model llama --set foo_bar=3 -o bad.onnx
leftovers=$(find . -name '.hfx-*')
[ -z "$leftovers" ] || fail "scratch left behind: $leftovers"

step "done"
