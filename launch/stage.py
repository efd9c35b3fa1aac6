"""`python -m launch.stage`: put a recipe's weights and data in one directory for an offline cluster, and check it there.

    python -m launch.stage RECIPE [key=value ...] --to DIR     (where there is internet) fetch and write a recipe
    python -m launch.stage --verify DIR                          (on the cluster) every file against the manifest
    python -m launch.stage --check-layout KIND DIR               data the hub does not serve: imagenet, bert,
                                                                 mlperf-llama (docs/staging.md)

Staging reads the recipe's model.path, model.tokenizer, data.dataset and data.eval_dataset. A value that is
a Hugging Face repository (ORG/NAME, optionally @REVISION) is downloaded with huggingface_hub's
snapshot_download at that revision, pinned to the commit it resolves to: models to DIR/models/ORG/NAME (one
weight format: safetensors where the repository has them; a tokenizer-only repository gets its tokenizer
files), data sets to DIR/data/ORG/NAME. An existing local file or directory is copied to DIR/local/. The
recipe is written to DIR/recipes/<name>.yaml with those keys pointing at the copies, relative to the recipe
file, so DIR can be moved or mounted anywhere. DIR/manifest.json lists every file with its size, sha256 and
source (repository and commit, or the local path it was copied from).

Hub access is huggingface_hub's own: HF_ENDPOINT, and a token from HF_TOKEN or `hf auth login`'s cache. No
token is written anywhere under DIR.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import json
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import yaml

from trainer.binding import apply_override, parse_override
from trainer.config import RECIPE_RELATIVE_PATHS, RecipeError, load_recipe
from trainer.recipe_yaml import read_recipe
from telemetry.errors import InputProblems, OneLineParser, output_dir_problem, print_errors
from telemetry.work_progress import WorkProgress

MANIFEST = "manifest.json"
FORMAT = "fabric-harness-stage/1"
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")  # what trainer/data/sft.py load_table reads
# A model repository often carries its weights twice or thrice (safetensors, PyTorch .bin, Meta's original/
# consolidated .pth): only the format the harness loads is fetched.
META_FILES = ["*.json", "*.model", "*.txt", "*.tiktoken", "*.md", "LICENSE*"]
SKIP_ALWAYS = ["original/*", ".gitattributes"]
CHUNK = 16 << 20


class StageError(InputProblems):
    """Bad input: each entry of `problems` is one complete line."""


# ---------------------------------------------------------------- what a recipe names

@dataclass
class Source:
    key: str  # model.path, model.tokenizer, data.dataset, data.eval_dataset
    value: str
    kind: str  # "hub" or "local"
    repo: str | None = None
    revision: str | None = None
    repo_type: str | None = None  # "model" or "dataset"

    @property
    def tokenizer_only(self) -> bool:
        return self.key == "model.tokenizer"


def _suggest_repo(key: str, value: str) -> str:
    """A hint for a local path that is missing here: the hub repository it probably is."""
    if key.startswith("model."):
        from launch.nemo.common import MODELS
        name = os.path.basename(value.rstrip("/")).lower()
        for pattern, model in MODELS:
            if re.search(pattern, name):
                return f"; its hub repository is probably {key}={model.hf_id}"
        return "; give its hub repository, e.g. model.path=meta-llama/Llama-2-70b-hf"
    if "gov_report" in value or "/bert" in value:
        return ("; MLPerf's data is not on the hub: download it with MLCommons' scripts and check it with "
                "python -m launch.stage --check-layout (docs/staging.md), or stage with it as a local path")
    return "; give a hub data set (ORG/NAME[@REVISION]) or an existing local file or directory"


def sources(recipe) -> tuple[list[Source], list[str]]:
    """The recipe's model and data references, classified; problems for those that name nothing fetchable."""
    out, problems = [], []
    for key in RECIPE_RELATIVE_PATHS:
        section, name = key.split(".")
        value = getattr(getattr(recipe, section), name)
        if value is None:
            continue
        if key.startswith("data.") and (recipe.data.synthetic or recipe.workload == "collectives"):
            continue  # not read by the run
        if os.path.exists(value):
            out.append(Source(key, value, "local"))
            continue
        match = HUB_ID.match(value) if not value.startswith((".", "/", "~")) else None
        if match is None:
            problems.append(f"{key}: {value!r} is neither an existing path here nor a hub repository "
                            f"(ORG/NAME[@REVISION]){_suggest_repo(key, value)}")
            continue
        out.append(Source(key, value, "hub", match["repo"], match["rev"] or "main",
                          "model" if key.startswith("model.") else "dataset"))
    return out, problems


# ---------------------------------------------------------------- fetching

def _endpoint() -> str:
    """HF_ENDPOINT as recorded in the manifest: without any user:password part."""
    from huggingface_hub import constants
    parts = urlsplit(constants.ENDPOINT)
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


def _patterns(src: Source, names: list[str]) -> tuple[list[str] | None, list[str]]:
    """allow_patterns, ignore_patterns for snapshot_download."""
    if src.repo_type == "dataset":
        return None, SKIP_ALWAYS
    if src.tokenizer_only:
        return META_FILES, SKIP_ALWAYS
    kept = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in SKIP_ALWAYS)]
    if any(n.endswith(".safetensors") for n in kept):
        return META_FILES + ["*.safetensors"], SKIP_ALWAYS
    if any(n.endswith(".bin") for n in kept):
        return META_FILES + ["*.bin"], SKIP_ALWAYS
    raise StageError([f"{src.key}: {src.repo}@{src.revision} holds no weights (.safetensors or .bin); "
                      f"files: {', '.join(names[:12])}"])


def _hub_problem(src: Source, exc: Exception) -> str:
    from huggingface_hub import errors
    where = f"{src.key}: {src.repo_type} {src.repo}@{src.revision}"
    if isinstance(exc, errors.GatedRepoError):
        return (f"{where} is gated: accept its licence on the hub's page with your account, then log in "
                "(hf auth login) or export HF_TOKEN")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return f"{where}: no such repository at {_endpoint()} (or it is private and no valid token was given)"
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{where}: no such revision (allowed: a branch, a tag or a commit of the repository)"
    if isinstance(exc, errors.OfflineModeIsEnabled) or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return f"{where}: HF_HUB_OFFLINE is set; staging needs the hub: run it with HF_HUB_OFFLINE=0"
    return f"{where}: cannot fetch from {_endpoint()}: {' '.join(str(exc).split())[:300]}"


def fetch_hub(src: Source, dest: str) -> dict:
    """Download one repository at one commit into `dest`; check sizes (and LFS sha256) against its listing."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi()
    try:
        commit = api.repo_info(src.repo, repo_type=src.repo_type, revision=src.revision).sha
        listing = {f.path: f for f in api.list_repo_tree(src.repo, repo_type=src.repo_type, revision=commit,
                                                         recursive=True) if isinstance(f, RepoFile)}
        allow, ignore = _patterns(src, sorted(listing))
        snapshot_download(src.repo, repo_type=src.repo_type, revision=commit, local_dir=dest,
                          allow_patterns=allow, ignore_patterns=ignore)
    except StageError:
        raise
    except Exception as exc:  # huggingface_hub's errors: one line each
        raise StageError([_hub_problem(src, exc)]) from None
    wanted = list(filter_repo_objects(sorted(listing), allow_patterns=allow, ignore_patterns=ignore))
    problems = []
    for name in wanted:
        path = os.path.join(dest, *name.split("/"))
        entry = listing[name]
        if not os.path.isfile(path):
            problems.append(f"{src.key}: {name} was not downloaded")
        elif os.path.getsize(path) != entry.size:
            problems.append(f"{src.key}: {name} has {os.path.getsize(path)} bytes; the hub lists {entry.size}")
        elif entry.lfs is not None and sha256_file(path) != entry.lfs.sha256:
            problems.append(f"{src.key}: {name}: sha256 differs from the hub's ({entry.lfs.sha256})")
    if problems:
        raise StageError(problems)
    return {"repo": src.repo, "repo_type": src.repo_type, "revision": src.revision, "commit": commit,
            "endpoint": _endpoint(), "files": wanted}


def staged_dir(repo_type: str, repo: str) -> str:
    """Where a hub repository lands inside the staging directory ('/'-separated, relative): manifests that
    mount the directory name these paths (launch/k8s/, tests/launch/test_k8s.py)."""
    return ("models/" if repo_type == "model" else "data/") + repo


def _data_target(src: Source, root: str) -> str:
    """The path data.dataset / data.eval_dataset should name inside a staged data set repository."""
    files = sorted(os.path.relpath(os.path.join(d, f), root) for d, dirs, fs in os.walk(root)
                   for f in fs if f.endswith(DATA_SUFFIXES) and ".cache" not in os.path.relpath(d, root).split(os.sep))
    if not files:
        raise StageError([f"{src.key}: {src.repo}@{src.revision} holds no .jsonl, .json or .parquet files; "
                          "the harness reads those"])
    if len(files) == 1:
        return os.path.join(root, files[0])
    from datasets.data_files import get_data_patterns, resolve_pattern
    try:
        splits = {name: sorted(os.path.relpath(p, root) for pat in pats for p in resolve_pattern(pat, root))
                  for name, pats in get_data_patterns(root).items()}
    except Exception:  # no split pattern fits
        splits = {}
    order = ["train"] if src.key == "data.dataset" else ["validation", "test"]
    for split in order:
        chosen = [f for f in splits.get(split, []) if f.endswith(DATA_SUFFIXES)]
        if len(chosen) == 1:
            return os.path.join(root, chosen[0])
        parents = {os.path.dirname(f) for f in chosen}
        if chosen and len(parents) == 1:
            parent = parents.pop()
            siblings = [f for f in files if os.path.dirname(f) == parent]
            if sorted(siblings) == sorted(chosen):
                return os.path.join(root, parent)
    raise StageError([f"{src.key}: {src.repo} holds {len(files)} data files and no single {' or '.join(order)} "
                      f"split the harness can read as one path ({', '.join(files[:8])}); stage it, then set "
                      f"{src.key} to one of them under the staged data/{src.repo}/"])


def _copy_local(src: Source, to: str, taken: dict[str, str]) -> tuple[str, dict]:
    """Copy to DIR/local/<name>; `taken` (name -> source) keeps two sources of one name apart in a run."""
    origin = os.path.abspath(src.value).rstrip("/")
    base = name = os.path.basename(origin)
    n = 1
    while taken.get(name, origin) != origin:
        n += 1
        stem, dot, ext = base.partition(".")
        name = f"{stem}-{n}{dot}{ext}"
    taken[name] = origin
    dest = os.path.join(to, "local", name)
    if os.path.exists(dest):
        shutil.rmtree(dest) if os.path.isdir(dest) else os.remove(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.isdir(src.value):
        shutil.copytree(src.value, dest, ignore=shutil.ignore_patterns(".cache"))
    else:
        shutil.copy2(src.value, dest)
    return dest, {"local": os.path.abspath(src.value)}


# ---------------------------------------------------------------- manifest

def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def staged_files(root: str) -> list[str]:
    """Every file under `root` but the manifest and huggingface_hub's .cache/ bookkeeping, '/'-separated."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".cache")
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def write_manifest(root: str, sources_by_dir: dict[str, dict], jobs: int) -> dict:
    files = staged_files(root)
    digests = []
    with ThreadPoolExecutor(max(1, jobs)) as pool, WorkProgress("stage: sha256", len(files), "files", sys.stderr,
                                                            plain_every_s=10) as progress:
        for digest in pool.map(lambda rel: sha256_file(os.path.join(root, rel)), files):  # hashlib releases the GIL
            digests.append(digest)
            progress.advance()
    entries = []
    for rel, digest in zip(files, digests):
        owner = next((d for d in sources_by_dir if rel == d or rel.startswith(d + "/")), None)
        if owner is not None:
            src = sources_by_dir[owner]
        elif rel.startswith("recipes/"):
            src = {"generated": "python -m launch.stage"}
        else:  # put there by hand: listed and hashed, its origin unknown to the manifest
            src = {"origin": None}
        entry = {"path": rel, "size": os.path.getsize(os.path.join(root, rel)), "sha256": digest}
        entry.update({k: src[k] for k in ("repo", "repo_type", "commit", "local", "generated", "origin") if k in src})
        if "commit" in entry:
            entry["revision"] = entry.pop("commit")
        entries.append(entry)
    manifest = {"format": FORMAT, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "sources": [{"path": d, **{k: v for k, v in s.items() if k != "files"}}
                            for d, s in sorted(sources_by_dir.items())],
                "files": entries}
    with open(os.path.join(root, MANIFEST + ".tmp"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    os.replace(os.path.join(root, MANIFEST + ".tmp"), os.path.join(root, MANIFEST))
    return manifest


def _previous_sources(root: str) -> dict[str, dict]:
    """Sources of an earlier staging into the same directory (several recipes can share one)."""
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as f:
            return {s["path"]: {k: v for k, v in s.items() if k != "path"} for s in json.load(f)["sources"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def verify(root: str, jobs: int) -> list[str]:
    """One line per missing file, size or sha256 mismatch; [] when every file matches."""
    path = os.path.join(root, MANIFEST)
    if not os.path.isfile(path):
        raise StageError([f"--verify: {path} does not exist; allowed: a directory written by "
                          "python -m launch.stage ... --to DIR"])
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        files = [(e["path"], int(e["size"]), str(e["sha256"])) for e in manifest["files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StageError([f"--verify: {path} is not a staging manifest ({type(exc).__name__}: {exc})"]) from None

    def check(item) -> str | None:
        rel, size, digest = item
        full = os.path.join(root, *rel.split("/"))
        if not os.path.isfile(full):
            return f"missing: {rel}"
        got = os.path.getsize(full)
        if got != size:
            return f"size mismatch: {rel}: manifest {size} bytes, found {got}"
        found = sha256_file(full)
        return None if found == digest else f"sha256 mismatch: {rel}: manifest {digest}, found {found}"

    problems = []
    with ThreadPoolExecutor(max(1, jobs)) as pool, WorkProgress("verify", len(files), "files", sys.stderr, plain_every_s=10) as progress:
        for problem in pool.map(check, files):
            problems += [problem] if problem else []
            progress.advance()
    return problems


# ---------------------------------------------------------------- the staged recipe

def _relative(target: str, recipe_dir: str) -> str:
    return os.path.relpath(target, recipe_dir).replace(os.sep, "/")


def write_recipe(recipe_path: str, overrides: list[str], to: str, name: str, targets: dict[str, str],
                 argv: list[str]) -> str:
    """The recipe with overrides applied and every staged key pointing at its copy, relative to the file."""
    tree = read_recipe(recipe_path) or {}
    for text in overrides:
        parts, value = parse_override(text)
        apply_override(tree, parts, value)
    out_dir = os.path.join(to, "recipes")
    os.makedirs(out_dir, exist_ok=True)
    for key, target in targets.items():
        section, field = key.split(".")
        tree.setdefault(section, {})[field] = _relative(target, out_dir)
    path = os.path.join(out_dir, f"{name}.yaml")
    header = ("# Written by: python -m launch.stage " + " ".join(argv) + "\n"
              "# Model and data paths are relative to this file: the staged directory can be moved or mounted\n"
              "# anywhere. Check it where it runs: python -m launch.stage --verify <staged directory>\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + yaml.safe_dump(tree, sort_keys=False, default_flow_style=None, width=110))
    return path


def stage(recipe_path: str, overrides: list[str], to: str, jobs: int, argv: list[str]) -> str:
    try:
        recipe = load_recipe(recipe_path, overrides)
    except RecipeError as exc:
        raise StageError(exc.problems) from None
    found, problems = sources(recipe)
    if problems:
        raise StageError(problems)
    to = os.path.abspath(to)
    if problem := output_dir_problem(to, "--to"):
        raise StageError([problem])
    os.makedirs(to, exist_ok=True)
    by_dir = _previous_sources(to)
    fetched: dict[tuple, tuple[str, dict]] = {}
    targets: dict[str, str] = {}
    local_names: dict[str, str] = {}
    for src in found:
        if src.kind == "local":
            dest, info = _copy_local(src, to, local_names)
        else:
            # model.path and model.tokenizer on one repository: one download, the fuller one
            ident = (src.repo_type, src.repo, src.revision)
            if ident not in fetched or (fetched[ident][1].get("tokenizer_only") and not src.tokenizer_only):
                dest = os.path.join(to, *staged_dir(src.repo_type, src.repo).split("/"))
                print(f"[stage] {src.key}: {src.repo_type} {src.repo}@{src.revision} -> {dest}", flush=True)
                info = fetch_hub(src, dest)
                info["tokenizer_only"] = src.tokenizer_only
                fetched[ident] = (dest, info)
            dest, info = fetched[ident]
            if src.key.startswith("data."):
                targets[src.key] = _data_target(src, dest)
        targets.setdefault(src.key, dest)
        by_dir[os.path.relpath(dest, to).replace(os.sep, "/")] = {k: v for k, v in info.items()
                                                                   if k != "tokenizer_only"}
    written = write_recipe(recipe_path, overrides, to, recipe.name, targets, argv)
    try:
        check = load_recipe(written)
    except RecipeError as exc:  # would be a bug here: the source recipe loaded
        raise StageError([f"the written recipe {written} does not load: {p}" for p in exc.problems]) from None
    for key in targets:
        section, field = key.split(".")
        if not os.path.exists(getattr(getattr(check, section), field)):
            raise StageError([f"the written recipe's {key} does not resolve to the staged copy"])
    manifest = write_manifest(to, by_dir, jobs)
    total = sum(e["size"] for e in manifest["files"])
    print(f"[stage] {len(manifest['files'])} files, {total / 1e9:.3f} GB, manifest {os.path.join(to, MANIFEST)}")
    print(f"[stage] recipe {written}")
    return written


# ---------------------------------------------------------------- command line

class _Parser(OneLineParser):  # its own error line; no abbreviated options (OneLineParser)
    def error(self, message):
        print_errors(f"{self.explained(message)}; see python -m launch.stage --help")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    from .layouts import KINDS
    p = _Parser(prog="python -m launch.stage", description=__doc__.split("\n\n")[0],
                epilog="docs/staging.md has the whole flow. example: python -m launch.stage "
                       "recipes/llama70b_lora.yaml model.path=meta-llama/Llama-2-70b-hf --to /shared/staged")
    p.add_argument("recipe", nargs="?", help="recipe to stage")
    p.add_argument("overrides", nargs="*", help="key=value overrides, as python -m trainer takes them; a model or "
                   "data key may name a hub repository ORG/NAME[@REVISION]")
    p.add_argument("--to", metavar="DIR", help="the staging directory (created; several recipes may share one)")
    p.add_argument("--verify", metavar="DIR", help="check every file of DIR against DIR/manifest.json")
    p.add_argument("--check-layout", nargs=2, metavar=("KIND", "DIR"),
                   help=f"check a data set fetched by other means; KIND: {', '.join(KINDS)}")
    p.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="files hashed at once")
    return p


def _copy_failure(exc: BaseException) -> str:
    """The first reason a copy failed: shutil.Error holds one (source, destination, reason) per file."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        reason = str(exc.args[0][0][-1])
        return f"{reason.split(':')[0]}, {len(exc.args[0])} file(s)"
    return getattr(exc, "strerror", None) or str(exc)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_intermixed_args(argv)
    modes = [m for m in ("to", "verify", "check_layout") if getattr(args, m)]
    if args.jobs < 1:
        return print_errors(f"--jobs: got {args.jobs}; expected an integer >= 1 (files hashed at once)")
    try:
        if args.verify and not args.recipe and len(modes) == 1:
            problems = verify(args.verify, args.jobs)
            for line in problems:
                print(line)
            if problems:
                print_errors(f"{len(problems)} file(s) of {args.verify} differ from its manifest")
                return 1
            print(f"[stage] {args.verify}: every file matches {MANIFEST}")
            return 0
        if args.check_layout and not args.recipe and len(modes) == 1:
            from .layouts import check_layout
            return check_layout(*args.check_layout)
        if args.recipe and modes == ["to"]:
            try:
                stage(args.recipe, args.overrides, args.to, args.jobs, argv)
            except (OSError, shutil.Error) as exc:  # the --to check's probe fitted; the copies did not
                return print_errors(f"--to: {args.to!r} could not take the staged files ({_copy_failure(exc)}); "
                                    "allowed: a directory on a filesystem with room for the recipe's files that "
                                    "this user can write")
            return 0
    except StageError as exc:
        for line in exc.problems:
            print_errors(str(line))
        return 2
    return print_errors("give RECIPE [key=value ...] --to DIR, or --verify DIR, or --check-layout KIND DIR (one of "
                        "them); see python -m launch.stage --help")


if __name__ == "__main__":
    sys.exit(main())
