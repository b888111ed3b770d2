"""`--model-id`'s download step: the files an export needs, fetched into the
Hugging Face cache by huggingface_hub itself. The host runs this with the
worker's Python (`python -I -c`) before the trace, outside the worker's
sandbox (it needs the network); nothing here imports torch or transformers
or runs what it downloads: the files are only written into the cache, and
the host then checks the snapshot as it checks any model folder.

    python -I -c SCRIPT '{"repo": ..., "revision": ..., "cache": ...,
                          "allow_pickle": false, "trust_remote_code": false}'

Writes JSON lines on stdout: `{"files": N, "bytes": B, "commit": C}` once
the listing is known, `{"progress": [files_done, bytes_done]}` as files
arrive, then `{"snapshot": PATH}` or `{"error": ONE_LINE}`.
"""

import json
import os
import re
import sys
import threading
import time

ARGS = json.loads(sys.argv[1])
REPO = ARGS["repo"]
REVISION = ARGS["revision"]
SHOWN = f"{REPO}@{REVISION}"

# What an export reads beside the weights, when the repository has it.
METADATA = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
)

# Weights, in the order transformers prefers them; the pickled ones only with --allow-pickle.
SAFETENSORS = ("model.safetensors.index.json", "model.safetensors")
PICKLES = ("pytorch_model.bin.index.json", "pytorch_model.bin")

# A file name taken from the repository (an index's shards, its modeling code): a plain name in
# its top folder, which is also a literal `allow_patterns` entry (no fnmatch characters).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")

# An index names its shards; the largest real ones are a few MiB.
MAX_INDEX_BYTES = 64 << 20


class Refused(Exception):
    """One line for the user: what is wrong with the repository, and what to do."""


def say(**event):
    print(json.dumps(event), flush=True)


class Progress:
    """Takes the place of huggingface_hub's tqdm bars (`tqdm_class`): each bar
    is counted, not drawn, and the counts go to the host, which shows them
    its own way. The files bar is the one `snapshot_download` names
    `Fetching N files`; the bytes bar the one counting what is written."""

    lock = threading.Lock()
    files = 0
    written = 0
    last = 0.0

    def __init__(self, *args, **kwargs):
        self.desc = str(kwargs.get("desc") or "")
        self.unit = kwargs.get("unit")
        self.total = kwargs.get("total") or 0
        self.n = kwargs.get("initial") or 0
        self.format_dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def update(self, n=1):
        n = n or 0
        self.n += n
        with Progress.lock:
            if self.desc.startswith("Fetching"):
                Progress.files += n
            elif self.unit == "B" and not self.desc.startswith("Downloading"):
                Progress.written += n
            else:
                return
            Progress.report(force=self.desc.startswith("Fetching"))

    @staticmethod
    def report(force=False):
        now = time.monotonic()
        if force or now - Progress.last > 0.25:
            Progress.last = now
            say(progress=[Progress.files, Progress.written])

    def refresh(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def set_description(self, desc=None, refresh=True):
        pass

    def set_description_str(self, desc=None, refresh=True):
        pass

    def set_postfix_str(self, s="", refresh=True):
        pass

    @classmethod
    def get_lock(cls):
        return cls.lock

    @classmethod
    def set_lock(cls, lock):
        pass


def wanted(api, commit, names):
    """The repository's files an export needs, from its listing at `commit`."""
    from huggingface_hub import hf_hub_download

    if "config.json" not in names:
        raise Refused(
            f"--model-id {SHOWN}: the repository has no config.json: hfx exports transformers "
            "models (a config.json and their weights)"
        )
    files = [name for name in METADATA if name in names]
    if ARGS["trust_remote_code"]:
        # The model's own code (`auto_map`): loaded only because --trust-remote-code says so.
        files += sorted(n for n in names if n.endswith(".py") and PLAIN_NAME.fullmatch(n))
    kinds = SAFETENSORS + (PICKLES if ARGS["allow_pickle"] else ())
    for index, single in (kinds[i : i + 2] for i in range(0, len(kinds), 2)):
        if index in names:
            path = hf_hub_download(
                REPO, index, revision=commit, cache_dir=ARGS["cache"], tqdm_class=Progress
            )
            return files + [index] + shards(path, index, names)
        if single in names:
            return files + [single]
    pickled = sorted(n for n in names if n.endswith(".bin") and "/" not in n)
    if pickled and not ARGS["allow_pickle"]:
        raise Refused(
            f"--model-id {SHOWN}: the repository's weights are pickled ({', '.join(pickled[:3])}), "
            "and a pickle runs code when loaded: add --allow-pickle if you trust it, or name a "
            "revision with model.safetensors"
        )
    raise Refused(
        f"--model-id {SHOWN}: the repository holds no weights hfx reads "
        f"({', '.join(kinds[1::2] + kinds[0::2])})"
    )


def shards(path, index, names):
    """The shards `index` names: plain file names the repository holds."""
    if os.path.getsize(path) > MAX_INDEX_BYTES:
        raise Refused(f"--model-id {SHOWN}: {index} has more than {MAX_INDEX_BYTES} bytes")
    with open(path, encoding="utf-8") as f:
        try:
            weight_map = json.load(f).get("weight_map")
        except (ValueError, AttributeError) as e:
            raise Refused(f"--model-id {SHOWN}: {index} is not an index ({e})") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise Refused(f"--model-id {SHOWN}: {index} has no weight_map")
    found = set()
    for shard in weight_map.values():
        if not isinstance(shard, str) or not PLAIN_NAME.fullmatch(shard):
            raise Refused(
                f"--model-id {SHOWN}: {index} names the shard {shard!r}, not a file name beside it"
            )
        if shard not in names:
            raise Refused(
                f"--model-id {SHOWN}: {index} names the shard {shard}, which the repository "
                "does not hold"
            )
        found.add(shard)
    return sorted(found)


def download():
    from huggingface_hub import HfApi, snapshot_download

    api = HfApi()
    info = api.model_info(REPO, revision=REVISION, files_metadata=True)
    commit = info.sha
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or ()}
    files = wanted(api, commit, set(sizes))
    say(files=len(files), bytes=sum(sizes[f] for f in files), commit=commit)
    snapshot = snapshot_download(
        REPO,
        revision=REVISION,
        cache_dir=ARGS["cache"],
        allow_patterns=files,
        tqdm_class=Progress,
    )
    if os.path.basename(snapshot) != commit:
        raise Refused(
            f"--model-id {SHOWN}: the revision moved to another commit during the download "
            f"(from {commit} to {os.path.basename(snapshot)}): run again"
        )
    Progress.report(force=True)
    say(snapshot=snapshot)


def one_line(error):
    """What went wrong, for the user, in one line naming the model and the fix."""
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    endpoint = constants.ENDPOINT
    if isinstance(error, Refused):
        return str(error)
    if isinstance(error, hub.GatedRepoError):
        return (
            f"--model-id {SHOWN}: the repository is gated: accept its conditions at "
            f"{endpoint}/{REPO} and log in (`hf auth login`, or set HF_TOKEN)"
        )
    if isinstance(error, hub.RepositoryNotFoundError):
        return (
            f"--model-id {SHOWN}: {endpoint} has no repository {REPO} (or it is private: "
            "log in with `hf auth login`, or set HF_TOKEN)"
        )
    if isinstance(error, hub.RevisionNotFoundError):
        return (
            f"--model-id {SHOWN}: the repository {REPO} has no revision `{REVISION}`: give a "
            "branch, a tag or a commit hash it has"
        )
    if isinstance(error, hub.HfHubHTTPError):
        status = error.response.status_code if error.response is not None else "?"
        return (
            f"--model-id {SHOWN}: {endpoint} answered HTTP {status} "
            f"({first_line(error)}): run again later"
        )
    if isinstance(error, hub.IncompleteSnapshotError) or isinstance(
        error, hub.LocalEntryNotFoundError
    ):
        cause = error.__cause__ or error
        return (
            f"--model-id {SHOWN}: {endpoint} cannot be reached ({first_line(cause)}) and the "
            "cache does not hold the model: check the network (or HF_ENDPOINT) and run again"
        )
    import httpx2

    if isinstance(error, (httpx2.ConnectError, httpx2.TimeoutException)):
        return (
            f"--model-id {SHOWN}: {endpoint} cannot be reached ({first_line(error)}): check the "
            "network (or HF_ENDPOINT) and run again"
        )
    if isinstance(error, (httpx2.TransportError, OSError)):
        # A connection cut mid-file (after huggingface_hub's own retries) or a short file: the
        # partial file was removed, nothing of it is in the cache.
        return (
            f"--model-id {SHOWN}: the download was cut short ({first_line(error)}): run again "
            "to fetch what is missing"
        )
    return f"--model-id {SHOWN}: the download failed: {type(error).__name__}: {first_line(error)}"


def first_line(error):
    text = str(error).strip().splitlines()
    text = [line for line in text if line.strip()]
    return (text[0] if text else type(error).__name__)[:300]


def main():
    try:
        download()
    except BaseException as error:  # noqa: B036 - every failure becomes the one line the host shows
        if isinstance(error, KeyboardInterrupt):
            say(error=f"--model-id {SHOWN}: the download was interrupted: run again to finish it")
        else:
            try:
                say(error=one_line(error))
            except Exception as unexpected:
                say(error=f"--model-id {SHOWN}: the download failed: {error!r} ({unexpected!r})")
        sys.exit(1)


main()
