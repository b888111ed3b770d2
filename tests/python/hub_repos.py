"""The repositories `hub_server.py` serves for the `--model-id` download tests:
tiny random models written by transformers' `save_pretrained`.

    python hub_repos.py REPOS

rebuilds REPOS and prints `{"repo@revision": commit, ...}` as JSON:

- `tiny-org/tiny-llama`: `main` a LlamaForCausalLM, beside files no export
  reads (a pickled copy of its weights, a README, an ONNX file); the tag
  `v1` another commit, a Qwen2ForCausalLM (another class, so a trace says
  which revision it loaded);
- `tiny-org/sharded`: a LlamaForCausalLM in several safetensors shards and
  their index;
- `tiny-org/pickled`: weights only as `pytorch_model.bin`;
- `tiny-org/gated`: `main` as tiny-llama's, but gated;
- `tiny-org/cut`: `main` as tiny-llama's, for the interrupted download.
"""

import hashlib
import json
import os
import shutil
import sys

from tiny_models import TINY_DECODER, saved, tiny_llama

REPOS = os.path.abspath(sys.argv[1])


def add_commit(repo, files, revisions, resolved):
    """`files` (name -> bytes) as a commit of `repo` named by `revisions`."""
    digest = hashlib.sha1(repo.encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    commit = digest.hexdigest()
    folder = os.path.join(REPOS, repo)
    os.makedirs(os.path.join(folder, commit), exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(folder, commit, name), "wb") as f:
            f.write(data)
    refs_path = os.path.join(folder, "refs.json")
    refs = json.load(open(refs_path)) if os.path.exists(refs_path) else {}
    refs.update({revision: commit for revision in revisions})
    with open(refs_path, "w") as f:
        json.dump(refs, f)
    for revision in revisions:
        resolved[f"{repo}@{revision}"] = commit
    return commit


def pickled(model):
    """The model's weights as torch pickles them (`pytorch_model.bin`)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def main():
    import transformers

    shutil.rmtree(REPOS, ignore_errors=True)
    resolved = {}
    llama_model = tiny_llama(seed=0)
    llama = saved(llama_model)
    unread = {
        "pytorch_model.bin": pickled(llama_model),
        "README.md": b"# tiny-llama\n",
        "model.onnx": b"not read by an export",
    }
    add_commit("tiny-org/tiny-llama", {**llama, **unread}, ["main"], resolved)
    qwen2 = saved(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TINY_DECODER)))
    add_commit("tiny-org/tiny-llama", qwen2, ["v1"], resolved)

    sharded = saved(tiny_llama(seed=1), max_shard_size="20KB")
    if "model.safetensors.index.json" not in sharded:
        raise SystemExit(f"save_pretrained wrote no shards: {sorted(sharded)}")
    add_commit("tiny-org/sharded", sharded, ["main"], resolved)

    add_commit(
        "tiny-org/pickled",
        {"config.json": llama["config.json"], "pytorch_model.bin": pickled(llama_model)},
        ["main"],
        resolved,
    )
    add_commit("tiny-org/gated", llama, ["main"], resolved)
    open(os.path.join(REPOS, "tiny-org/gated/GATED"), "w").close()
    add_commit("tiny-org/cut", llama, ["main"], resolved)
    print(json.dumps(resolved, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
