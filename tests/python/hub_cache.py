"""A Hugging Face Hub cache for the `--model-id` tests, written with huggingface_hub's
own cache code and read back by its own readers. No network: HF_HUB_OFFLINE=1.

    python hub_cache.py HF_HOME

rebuilds HF_HOME/hub with tiny random models:

- `tiny-org/tiny-llama`: `main` is a LlamaForCausalLM; the tag `v1` a
  Qwen2ForCausalLM (another class, so a trace says which revision it loaded);
- `tiny-org/custom-llama`: `main` is a LlamaForCausalLM subclass in the
  repository's own code (`auto_map` in config.json);
- `tiny-org/partial`: `main` holds config.json only (an interrupted download);

and prints as JSON what huggingface_hub resolves each `repo@revision` to
(`snapshot_download(..., local_files_only=True)`):
`{"tiny-org/tiny-llama@main": {"commit": "...", "snapshot": "..."}, ...}`.

Files land as `hf_hub_download` leaves them: each in `blobs/` under its etag
(the sha256 of an LFS file, the git blob id of any other), linked from
`snapshots/<commit>/` by huggingface_hub's `_create_symlink`, with
`refs/<revision>` written by `_cache_commit_hash_for_specific_revision`.
"""

import hashlib
import json
import os
import shutil
import sys

HOME = os.path.abspath(sys.argv[1])
# Before huggingface_hub is imported: its constants are read once.
os.environ["HF_HOME"] = HOME
os.environ["HF_HUB_OFFLINE"] = "1"
for legacy in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
    os.environ.pop(legacy, None)

from huggingface_hub import scan_cache_dir, snapshot_download  # noqa: E402
from huggingface_hub.file_download import (  # noqa: E402
    _cache_commit_hash_for_specific_revision,
    _create_symlink,
    repo_folder_name,
)
from tiny_models import TINY_DECODER, saved, tiny_llama  # noqa: E402

CACHE = os.path.join(HOME, "hub")

# Stored in git LFS on the Hub, so their etag is the sha256 of their bytes.
LFS_SUFFIXES = (".safetensors", ".bin")

CUSTOM_CONFIG = """from transformers import LlamaConfig


class CustomLlamaConfig(LlamaConfig):
    model_type = "custom-llama"
"""

CUSTOM_MODEL = """from transformers import LlamaForCausalLM

from .configuration_custom import CustomLlamaConfig


class CustomLlamaForCausalLM(LlamaForCausalLM):
    config_class = CustomLlamaConfig
"""


def etag(name, data):
    """What the Hub answers as the file's etag, which names its blob."""
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit(repo, files):
    """A made-up commit hash, fixed by the repository and its files."""
    digest = hashlib.sha1(repo.encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + etag(name, files[name]).encode())
    return digest.hexdigest()


def add_commit(repo, files, revisions):
    """`files` (name -> bytes) as commit of `repo`, named by `revisions`; returns the commit."""
    storage = os.path.join(CACHE, repo_folder_name(repo_id=repo, repo_type="model"))
    sha = commit(repo, files)
    for name, data in files.items():
        blob = os.path.join(storage, "blobs", etag(name, data))
        os.makedirs(os.path.dirname(blob), exist_ok=True)
        with open(blob, "wb") as f:
            f.write(data)
        pointer = os.path.join(storage, "snapshots", sha, name)
        os.makedirs(os.path.dirname(pointer), exist_ok=True)
        _create_symlink(blob, pointer, new_blob=False)
    for revision in revisions:
        _cache_commit_hash_for_specific_revision(storage, revision, sha)
    return sha


def main():
    import transformers

    shutil.rmtree(CACHE, ignore_errors=True)
    llama = saved(tiny_llama(seed=0))
    qwen2 = saved(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TINY_DECODER)))
    add_commit("tiny-org/tiny-llama", llama, ["main"])
    add_commit("tiny-org/tiny-llama", qwen2, ["v1"])

    custom = dict(llama)
    config = json.loads(custom["config.json"])
    config.update(
        model_type="custom-llama",
        architectures=["CustomLlamaForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_custom.CustomLlamaConfig",
            "AutoModelForCausalLM": "modeling_custom.CustomLlamaForCausalLM",
        },
    )
    custom["config.json"] = json.dumps(config, indent=2).encode()
    custom["configuration_custom.py"] = CUSTOM_CONFIG.encode()
    custom["modeling_custom.py"] = CUSTOM_MODEL.encode()
    add_commit("tiny-org/custom-llama", custom, ["main"])

    add_commit("tiny-org/partial", {"config.json": llama["config.json"]}, ["main"])

    # huggingface_hub reads the cache back: no repository it finds damaged,
    # and each revision resolved by its own offline lookup.
    info = scan_cache_dir(CACHE)
    if info.warnings:
        raise SystemExit(f"huggingface_hub finds the cache damaged: {info.warnings}")
    resolved = {}
    for repo in info.repos:
        for revision in repo.revisions:
            for ref in sorted(revision.refs) or [revision.commit_hash]:
                snapshot = snapshot_download(
                    repo.repo_id, revision=ref, cache_dir=CACHE, local_files_only=True
                )
                resolved[f"{repo.repo_id}@{ref}"] = {
                    "commit": os.path.basename(snapshot),
                    "snapshot": snapshot,
                }
    print(json.dumps(resolved, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
