#!/usr/bin/env bash
# Re-captures the self-test case of every fix and translation plugin in
# plugins/onnx from real traces (`hfx plugins capture`); each case's `about`
# field repeats its command. Run from the repository root after
# `cargo build` and `cargo xtask build-plugins`; `cargo xtask test` checks them
# (`hfx plugins test plugins`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
HFX=${HFX:-target/debug/hfx}
export PYTHONPATH=tests/python

# capture PLUGIN CASE-NAME CAPTURE-ARGS...
capture() {
  local plugin=$1 name=$2
  shift 2
  "$HFX" plugins capture --backend onnx "$@" --case "plugins/onnx/$plugin/selftest/$name.json"
}
pattern() { echo "python:fx_patterns:$1"; }
# A tiny Llama whose pieces stay small (weights are a case's input values).
LLAMA=(--model llama --set hidden_size=32,intermediate_size=64,num_attention_heads=4,num_key_value_heads=2,vocab_size=128)

# ── FX node fixes: the patterns of tests/python/fx_patterns.py, before any fix ──
capture fix-alias alias --model-fn "$(pattern alias)" --static --node aten.alias.default
capture fix-assertion unbacked-size --model-fn "$(pattern dead_comparison)" --static --node aten._assert_scalar.default
capture fix-dead-comparison unbacked-size --model-fn "$(pattern dead_comparison)" --static --node _operator.ge
capture fix-index-put-last-dim index-put --model-fn "$(pattern index_put_last_dim)" --static --node aten.index_put.default --radius 2
capture fix-integral-tensor-float-scalar mask-arithmetic --model-fn "$(pattern integral_tensor_float_scalar)" --static --node aten.rsub.Scalar
capture fix-noop-squeeze squeeze --model-fn "$(pattern noop_squeeze)" --static --node aten.squeeze.dim
capture fix-scatter-reduce reductions --model-fn "$(pattern scatter_reduce)" --static --node aten.scatter_reduce.two --count 5
capture fix-slice-implicit-start slice --model-fn "$(pattern slice_implicit_start)" --static --node aten.slice.Tensor
capture fix-sort-stable sort --model-fn "$(pattern sort_stable)" --static --node aten.sort.stable
# An ONNX IR fix: the piece is translated by the set's translations first.
capture fix-topk-sorted topk --model-fn "$(pattern unsorted_topk)" --static --node aten.topk.default

# ── Translations: pieces of tiny random models, after the ONNX fixes ──
FIXED=(--plugins plugins/onnx)
capture translate-attention llama-sdpa "${LLAMA[@]}" "${FIXED[@]}" --static --node aten.scaled_dot_product_attention.default
capture translate-conv vit-patches --model vit --set hidden_size=32,intermediate_size=64,num_attention_heads=4,image_size=32,patch_size=8 "${FIXED[@]}" --static --node aten.conv2d.default
capture translate-elementwise llama-rms-norm "${LLAMA[@]}" "${FIXED[@]}" --static --node aten.rsqrt.default --radius 2
capture translate-matmul llama-linear "${LLAMA[@]}" "${FIXED[@]}" --static --node aten.linear.default --count 2
capture translate-normalization bert-layer-norm --model bert --set hidden_size=32,intermediate_size=64,num_attention_heads=4,vocab_size=128 "${FIXED[@]}" --static --node aten.layer_norm.default
capture translate-reduction llama-mean "${LLAMA[@]}" "${FIXED[@]}" --static --node aten.mean.dim
capture translate-shape llama-rotary "${LLAMA[@]}" "${FIXED[@]}" --static --node aten.transpose.int --count 3
capture translate-symbolic sizes --model-fn "$(pattern symbolic_sizes)" --node _operator.mul --radius 1
# math.floor/ceil/trunc and sym_float of sizes, as the worker saves them (sym_int of a float // 1).
capture translate-symbolic rounding --model-fn python:openvino_patterns:size_rounding --node torch.sym_int --count 4 --radius 2
# Op families no small model holds: the patterns of tests/python/patterns_*.py.
family() { echo "python:patterns_$1:$2"; }
capture translate-distance cdist --model-fn "$(family numeric cdist)" "${FIXED[@]}" --static --node aten._cdist_forward.default
capture translate-padding constant-pad --model-fn "$(family image constant_pad)" "${FIXED[@]}" --static --node aten.constant_pad_nd.default --count 3
capture translate-padding pad-between-transposes --model-fn "$(family image pad_between_transposes)" "${FIXED[@]}" --static --node aten.constant_pad_nd.default --count 2 --radius 1
capture translate-padding reflection-pad --model-fn "$(family image reflection_pad)" "${FIXED[@]}" --static --node aten.reflection_pad2d.default --count 2
capture translate-padding replication-pad --model-fn "$(family image replication_pad)" "${FIXED[@]}" --static --node aten.replication_pad3d.default --count 2
capture translate-pooling adaptive-avg-pool --model-fn "$(family image adaptive_avg_pool)" "${FIXED[@]}" --static --node aten.adaptive_avg_pool2d.default --count 3
capture translate-pooling avg-pool --model-fn "$(family image avg_pool)" "${FIXED[@]}" --static --node aten.avg_pool2d.default --count 5
capture translate-pooling max-pool --model-fn "$(family image max_pool)" "${FIXED[@]}" --static --node aten.max_pool2d_with_indices.default --count 3
capture translate-random dropout-extremes --model-fn "$(family numeric dropout_extremes)" "${FIXED[@]}" --static --node aten.native_dropout.default --count 2
capture translate-resize bilinear --model-fn "$(family image upsample_linear)" "${FIXED[@]}" --static --node aten.upsample_bilinear2d.vec --count 3
capture translate-resize col2im --model-fn "$(family image col2im)" "${FIXED[@]}" --static --node aten.col2im.default --count 2
capture translate-resize grid-sample --model-fn "$(family image grid_sample)" "${FIXED[@]}" --static --node aten.grid_sampler_2d.default --count 3
capture translate-resize nearest --model-fn "$(family image upsample_nearest)" "${FIXED[@]}" --static --node aten.upsample_nearest2d.vec --count 3
capture translate-shape matrix-transposes --model-fn "$(family indexing matrix_transposes)" "${FIXED[@]}" --static --node aten.numpy_T.default --count 2
capture translate-shape split-counted-sizes --model-fn "$(family indexing split_counted_sizes)" "${FIXED[@]}" --static --node aten.split_with_sizes.default
capture translate-scatter select-scatter --model-fn "$(family indexing select_scatter)" "${FIXED[@]}" --static --node aten.select_scatter.default --count 2
capture translate-trigonometry atan2 --model-fn "$(family math trigonometry)" "${FIXED[@]}" --static --node aten.atan2.default

# ── Patches: a model to trace with and without the patch (a Python-level
# program of tests/python/patch_patterns.py, `--program`), expecting the ops
# the integration tests expect. Hand-written cases (layers, a mask function,
# an architecture, a transformers function torch.fx traces into) are not
# regenerated: rms-norm-no-affine, vmap-mask-expansion, byte-group-hash,
# nllb-moe-classifier-cast, sliding-window-cache, kernels-unavailable.
# patch_case DIR NAME PATTERN ["" | --static] [EXPECT-JSON]
patch_case() {
  local dir=$1 name=$2 pattern=$3 static=$4 expect=${5:-}
  local case="plugins/$dir/selftest/$name.json"
  "$HFX" plugins capture --program --model-fn "python:patch_patterns:$pattern" $static --case "$case"
  if [ -n "$expect" ]; then
    python3 - "$case" "$expect" <<'PY'
import json, sys
path, expect = sys.argv[1], json.loads(sys.argv[2])
case = json.load(open(path))
case["expect"] = expect
open(path, "w").write(json.dumps(case, indent=2) + "\n")
PY
  fi
}
ops() { echo "{\"ops\": {\"absent\": [$1], \"present\": [$2]}}"; }
patch_case onnx/patch-split-symbolic split split_symbolic "" "$(ops '"aten.split"' '"aten.narrow"')"
patch_case onnx/patch-chunk-symbolic chunk chunk_symbolic "" "$(ops '"aten.chunk"' '"aten.narrow"')"
patch_case onnx/patch-roll roll roll "" "$(ops '"aten.roll"' '"aten.cat"')"
patch_case onnx/patch-reshape-contiguous reshape-transposed reshape_transposed --static "$(ops '' '"aten.clone"')"
patch_case onnx/patch-complex-unsqueeze-exp complex-rotation complex_rotation "" "$(ops '' '"aten.cos", "aten.sin"')"
patch_case onnx/patch-masked-scatter masked-scatter masked_scatter "" "$(ops '"aten.masked_scatter"' '"aten.cumsum", "aten.index_select"')"
patch_case onnx/patch-histc histograms histograms "" "$(ops '"aten.histc"' '"aten.scatter_add"')"
patch_case onnx/patch-sorted-search searches sorted_search "" "$(ops '"aten.searchsorted", "aten.bucketize"' '"aten.sum"')"
patch_case onnx/patch-cumulative-extremum cummax-cummin cumulative_extremum "" "$(ops '"aten.cummax", "aten.cummin"' '"aten.tril"')"
patch_case onnx/patch-randperm randperm randperm "" "$(ops '"aten.randperm"' '"aten.rand", "aten.argsort"')"
# Rows masked at every key: torch answers zeros, ONNX Runtime without the patch NaN.
patch_case onnx/patch-sdpa-masked-rows padded-rows sdpa_masked ""
# torch 2.13 traces this the same with or without the MATH backend (see tests/it/patches.rs).
patch_case dynamo/patch-sdpa-math-cpu data-dependent-batch data_dependent_batch --static '"answered"'

# ── ExecuTorch: the fixes on the patterns of tests/python/executorch_fx_patterns.py ──
# (fix-python-sym-op's cases keep no values: the worker's interpreter does not
# run executorch_prim ops, so they were cut by hand from these captures; the
# executorch patch cases' `expect` fields were written by hand, see their `about`.)
et_capture() {
  local backend=$1 plugin=$2 name=$3
  shift 3
  "$HFX" plugins capture --backend "$backend" "$@" --count 1 --radius 0 --case "plugins/executorch/$plugin/selftest/$name.json"
}
et_pattern() { echo "python:executorch_fx_patterns:$1"; }
et_capture executorch.xnnpack fix-amax-dim attention-max --model-fn "$(et_pattern amax_negative_dim)" --static --node aten.amax.default
et_capture executorch.xnnpack fix-amax-dim max-dim --model-fn "$(et_pattern amax_negative_dim)" --static --node aten.max.dim
et_capture executorch.xnnpack fix-clone-memory-format transposed-buffer --model-fn "$(et_pattern clone_of_transposed_buffer)" --static --node aten.clone.default
et_capture executorch.xnnpack fix-negative-slice-start masked-tail --model-fn "$(et_pattern tail_of_masked_tokens)" --static --node aten.slice.Tensor
et_capture executorch fix-sym-pow-as-mul size-squared --model-fn "$(et_pattern size_squared)" --node _operator.pow
