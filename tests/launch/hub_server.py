"""A small Hugging Face Hub on loopback, for tests: the endpoints `huggingface_hub`'s snapshot_download calls.

Read from huggingface_hub 2.x (hf_api.py repo_info / list_repo_tree, file_download.py get_hf_file_metadata /
http_get, utils/_http.py hf_raise_for_status), it serves, per repository (models and datasets):

    GET  /api/{models|datasets}/{repo}[/revision/{rev}]   repo info: id, sha (the commit), siblings
    GET  /api/{models|datasets}/{repo}/tree/{rev}[/{path}] the file listing (?recursive=true), with `lfs`
                                                          (sha256, size) for large files, like the Hub
    HEAD/GET /{repo}/resolve/{rev}/{file}                  model files; /datasets/{repo}/resolve/... datasets
    GET  /lfs/{sha256}                                     on a second port (another origin: the Hub's CDN),
                                                          where a large file's resolve redirects

Small files answer the resolve request themselves with ETag (the git blob id), X-Repo-Commit and
Content-Length; large ("LFS") files answer with a 302 to the CDN's /lfs/{sha256} carrying X-Linked-Etag (the sha256),
X-Linked-Size and X-Repo-Commit, as the Hub does (the client reads the metadata from the redirect itself
because it leaves the Hub's origin, and sends no token there). Errors carry the Hub's X-Error-Code (RepoNotFound,
RevisionNotFound, EntryNotFound, GatedRepo). A repository made with `gated_token` answers only requests
with `Authorization: Bearer <token>`. Listens on 127.0.0.1 only; every request is logged in `requests`.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".parquet", ".jsonl", ".model")  # what .gitattributes sends to LFS


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    repo_type: str  # "model" or "dataset"
    files: dict[str, bytes]
    gated_token: str | None = None
    commit: str = ""
    branches: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        listing = json.dumps(sorted((p, hashlib.sha256(b).hexdigest()) for p, b in self.files.items()))
        self.commit = self.commit or hashlib.sha1(listing.encode()).hexdigest()  # 40 hex digits, like git
        self.branches = self.branches or {"main": self.commit}

    def resolve(self, rev: str) -> str | None:
        return rev if rev == self.commit else self.branches.get(rev)


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its '/'-separated path: what a repository holding that folder serves."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class HubServer:
    def __init__(self, repos: list[Repo]):
        self.repos = {(r.repo_type, r.repo_id): r for r in repos}
        self.blobs = {hashlib.sha256(b).hexdigest(): b for r in repos for b in r.files.values()}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization)
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), _handler(self)) for _ in range(2)]  # hub, CDN
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in self._servers]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def __enter__(self) -> "HubServer":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        for s, t in zip(self._servers, self._threads):
            s.shutdown()
            s.server_close()
            t.join(timeout=10)


def _handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the test reads hub.requests instead
            pass

        def do_HEAD(self):
            self._route(head=True)

        def do_GET(self):
            self._route(head=False)

        # ---- replies
        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _json(self, value, head=False, headers=None):
            self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})}, head)

        def _error(self, status: int, code: str, head: bool, commit: str | None = None):
            headers = {"X-Error-Code": code, "Content-Type": "application/json"}
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, json.dumps({"error": code}).encode(), headers, head)

        # ---- routing
        def _route(self, head: bool):
            url = urlsplit(self.path)
            path, query = unquote(url.path), parse_qs(url.query)
            hub.requests.append((self.command, path, self.headers.get("Authorization")))
            parts = path.strip("/").split("/")
            if parts[:1] == ["lfs"] and len(parts) == 2:
                blob = hub.blobs.get(parts[1])
                return self._send(200, blob, {"ETag": f'"{parts[1]}"'}, head) if blob is not None \
                    else self._error(404, "EntryNotFound", head)
            if parts[:1] == ["api"] and len(parts) >= 4 and parts[1] in ("models", "datasets"):
                return self._api(parts[1][:-1], parts[2:], query, head)
            repo_type = "model"
            if parts[:1] == ["datasets"]:
                repo_type, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(repo_type, "/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
            self._error(404, "RepoNotFound", head)

        def _repo(self, repo_type: str, repo_id: str, head: bool) -> Repo | None:
            repo = hub.repos.get((repo_type, repo_id))
            if repo is None:
                self._error(404, "RepoNotFound", head)
                return None
            if repo.gated_token and self.headers.get("Authorization") != f"Bearer {repo.gated_token}":
                self._error(403 if self.headers.get("Authorization") else 401, "GatedRepo", head)
                return None
            return repo

        def _api(self, repo_type: str, rest: list[str], query: dict, head: bool):
            repo = self._repo(repo_type, "/".join(rest[:2]), head)
            if repo is None:
                return
            rest = rest[2:]
            rev = rest[1] if len(rest) >= 2 else "main"
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", head)
            if not rest or rest[0] == "revision":
                return self._json({"id": repo.repo_id, "sha": commit, "private": False,
                                   "gated": "manual" if repo.gated_token else False,
                                   "siblings": [{"rfilename": p} for p in sorted(repo.files)]}, head)
            if rest[0] == "tree":
                prefix = "/".join(rest[2:])
                recursive = query.get("recursive", ["false"])[0].lower() == "true"
                entries, folders = [], set()
                for p, data in sorted(repo.files.items()):
                    if prefix and not p.startswith(prefix + "/"):
                        continue
                    tail = p[len(prefix) + 1:] if prefix else p
                    if "/" in tail and not recursive:
                        folders.add((prefix + "/" if prefix else "") + tail.split("/")[0])
                        continue
                    entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": p}
                    if p.endswith(LFS_SUFFIXES):
                        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                        "pointerSize": 134}
                    entries.append(entry)
                entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in sorted(folders)]
                return self._json(entries, head)
            self._error(404, "EntryNotFound", head)

        def _resolve(self, repo_type: str, repo_id: str, rev: str, filename: str, head: bool):
            repo = self._repo(repo_type, repo_id, head)
            if repo is None:
                return
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", head)
            data = repo.files.get(filename)
            if data is None:
                return self._error(404, "EntryNotFound", head, commit)
            if filename.endswith(LFS_SUFFIXES):
                sha = hashlib.sha256(data).hexdigest()
                return self._send(302, b"", {"Location": f"{hub.cdn_url}/lfs/{sha}", "X-Repo-Commit": commit,
                                             "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))}, head)
            self._send(200, data, {"ETag": f'"{git_blob_id(data)}"', "X-Repo-Commit": commit}, head)

    return Handler


def tiny_llama_files(workdir: Path) -> dict[str, bytes]:
    """A Llama checkpoint of the tiny recipe's shape (config.json, model.safetensors, generation_config.json)
    saved by transformers, plus the byte tokenizer the project ships: a model repository's files."""
    import yaml
    from transformers import LlamaConfig, LlamaForCausalLM

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "recipes" / "tiny_llama_lora.yaml").read_text())["model"]["config"]
    LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(workdir)
    return {**read_tree(workdir), **read_tree(repo / "recipes" / "assets" / "byte_tokenizer")}
