"""A local Hugging Face Hub for the `--model-id` download tests: the
endpoints huggingface_hub calls to download a snapshot, served from folders
(`hub_repos.py` writes them), pointed at with `HF_ENDPOINT`. No internet.

    python hub_server.py REPOS LOG

prints `PORT` once it listens on 127.0.0.1, then serves until killed. Each
request is appended to LOG as one JSON line (`method`, `path`, `range`).

REPOS holds `<org>/<name>/refs.json` (`{"main": COMMIT, "v1": COMMIT}`) and
`<org>/<name>/<COMMIT>/<files>`. Endpoints:

- `GET /api/models/<repo>/revision/<rev>`: the model's info at `rev` (`sha`
  the commit, `siblings` its files with sizes);
- `GET /api/models/<repo>/tree/<commit>`: the files with their git blob id
  and, for LFS files (`.safetensors`, `.bin`), their sha256 and size;
- `HEAD|GET /<repo>/resolve/<rev>/<file>`: the file, with `ETag` (for LFS
  files also `X-Linked-Etag` and `X-Linked-Size`), `X-Repo-Commit`,
  `Content-Length`, and `Range` answered with 206.

Errors carry the Hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`,
`EntryNotFound`, `GatedRepo`), which huggingface_hub turns into its error
classes. A repository whose folder holds a file `GATED` answers 403
`GatedRepo` to everything. A file `CUT` beside LOG (`{"file": NAME, "at":
BYTES}`) makes every GET of that file stop at byte BYTES of it, closing the
connection: an interrupted download, until the test removes `CUT`.
"""

import hashlib
import http.server
import json
import os
import re
import sys
import threading
import urllib.parse

REPOS = os.path.abspath(sys.argv[1])
LOG = os.path.abspath(sys.argv[2])
LFS_SUFFIXES = (".safetensors", ".bin")
LOG_LOCK = threading.Lock()


def blob_id(data):
    """The git blob id of `data`: what the Hub gives as a regular file's etag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name):
    return name.endswith(LFS_SUFFIXES)


def etag(name, data):
    return hashlib.sha256(data).hexdigest() if is_lfs(name) else blob_id(data)


class Refusal(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def repo_folder(repo):
    folder = os.path.join(REPOS, repo)
    if ".." in repo.split("/") or not os.path.isfile(os.path.join(folder, "refs.json")):
        raise Refusal(404, "RepoNotFound", f"Repository {repo} not found")
    if os.path.exists(os.path.join(folder, "GATED")):
        raise Refusal(403, "GatedRepo", f"Access to model {repo} is restricted")
    return folder


def commit_of(folder, revision):
    with open(os.path.join(folder, "refs.json")) as f:
        refs = json.load(f)
    commit = refs.get(revision, revision)
    if not re.fullmatch(r"[0-9a-f]{40}", commit) or not os.path.isdir(os.path.join(folder, commit)):
        raise Refusal(404, "RevisionNotFound", f"Invalid rev id: {revision}")
    return commit


def files_of(folder, commit):
    root = os.path.join(folder, commit)
    return sorted(os.listdir(root)), root


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self):
        entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range")}
        with LOG_LOCK, open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def do_HEAD(self):
        self.serve(body=False)

    def do_GET(self):
        self.serve(body=True)

    def serve(self, body):
        self.record()
        path = urllib.parse.urlsplit(self.path).path
        try:
            if m := re.fullmatch(r"/api/models/(.+)/revision/([^/]+)", path):
                return self.info(urllib.parse.unquote(m[1]), urllib.parse.unquote(m[2]))
            if m := re.fullmatch(r"/api/models/(.+)/tree/([^/]+)", path):
                return self.tree(urllib.parse.unquote(m[1]), urllib.parse.unquote(m[2]))
            if m := re.fullmatch(r"/(.+)/resolve/([^/]+)/([^/]+)", path):
                repo, revision, name = (urllib.parse.unquote(g) for g in m.groups())
                return self.resolve(repo, revision, name, body)
            raise Refusal(404, None, f"no endpoint {path}")
        except Refusal as r:
            self.send_response(r.status)
            if r.code:
                self.send_header("X-Error-Code", r.code)
            self.send_header("X-Error-Message", r.message)
            data = json.dumps({"error": r.message}).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    def json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def info(self, repo, revision):
        folder = repo_folder(repo)
        commit = commit_of(folder, revision)
        names, root = files_of(folder, commit)
        siblings = [{"rfilename": n, "size": os.path.getsize(os.path.join(root, n))} for n in names]
        self.json({"id": repo, "modelId": repo, "sha": commit, "siblings": siblings})

    def tree(self, repo, revision):
        folder = repo_folder(repo)
        commit = commit_of(folder, revision)
        names, root = files_of(folder, commit)
        entries = []
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            entry = {"type": "file", "path": name, "size": len(data), "oid": blob_id(data)}
            if is_lfs(name):
                sha = hashlib.sha256(data).hexdigest()
                entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
            entries.append(entry)
        self.json(entries)

    def resolve(self, repo, revision, name, body):
        folder = repo_folder(repo)
        commit = commit_of(folder, revision)
        names, root = files_of(folder, commit)
        if name not in names:
            raise Refusal(404, "EntryNotFound", f"{name} does not exist at {commit}")
        with open(os.path.join(root, name), "rb") as f:
            data = f.read()
        start = 0
        ranged = self.headers.get("Range")
        if ranged and (m := re.fullmatch(r"bytes=(\d+)-", ranged.strip())):
            start = min(int(m[1]), len(data))
        self.send_response(206 if ranged else 200)
        tag = etag(name, data)
        self.send_header("ETag", f'"{tag}"')
        if is_lfs(name):
            self.send_header("X-Linked-Etag", f'"{tag}"')
            self.send_header("X-Linked-Size", str(len(data)))
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        cut = cut_at(name)
        if cut is not None:
            # The connection drops at byte `cut` of the file, whatever was asked.
            self.wfile.write(data[start : max(start, cut)])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data[start:])


def cut_at(name):
    try:
        with open(os.path.join(os.path.dirname(LOG), "CUT")) as f:
            cut = json.load(f)
    except FileNotFoundError:
        return None
    return cut["at"] if cut["file"] == name else None


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
