"""The hfx trace worker: the only place PyTorch model code runs.

The host embeds this package, unpacks it into its cache folder (checked
against the content hash it was built with) and starts `python -c` with the
folder on `sys.path`; `server.main` then reads one JSON request per line on
stdin and writes one JSON line per message on stdout (`protocol`). Anything
the model prints goes to stderr, which the host keeps for error reports.

Modules, by responsibility:

- `messages`: the messages (dataclasses) and `PROTOCOL`, generated from the
  host's `trace/protocol.rs` by `tools/protocol-gen`.
- `protocol`: reading (strict) and writing the messages, the version check.
- `server`: the request loop and the `Session` a request runs in.
- `sources`: model sources, sample inputs, backend preparation.
- `sandbox`: `Reach`, the resolved-object policy, and the patch-program
  interpreter (security-critical: the deciding half of the patch sandbox).
- `pytree`: the generic flattener for caches, output leaves and names.
- `checkpoint`: weights in a model folder's checkpoint, and a program's side
  weights.
- `trace`: the trace request, in the reference exporter's stages, and
  export-folder metadata.
- `verify`: the ONNX artifact in ONNX Runtime against eager PyTorch.
"""
