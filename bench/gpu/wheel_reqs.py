"""Helpers for fetch_wheels.sh (no torch needed):
  python bench/gpu/wheel_reqs.py project            the project's requirements and extras run.sh installs, one a line
  python bench/gpu/wheel_reqs.py sdist FILE.tar.gz  an sdist's own requirements (its PKG-INFO), one a line
  python bench/gpu/wheel_reqs.py standin DIR VER    an empty torch wheel of version VER in DIR
  python bench/gpu/wheel_reqs.py torchvision VER    the torchvision release that pairs with torch VER
  python bench/gpu/wheel_reqs.py prune DIR          drop wheels of what the GPU image already has; print the size
  python bench/gpu/wheel_reqs.py missing DIR        the wheels in DIR whose package this Python lacks, one a line
torch is left out everywhere: the GPU machine keeps its own, and the stand-in satisfies everything that
requires it while pip resolves, without downloading it."""
from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRAS = ("deepspeed",)  # run.sh installs the project with these extras
TOOLS = ("pytest>=7.4", "setuptools>=68", "wheel")  # the tests, and building the project and DeepSpeed's sdist


# What the GPU machine's image brings (docs/gpu_checks.md): pip resolves against it, so its wheels need not
# travel; the device machine carries at most 64 MiB with the checkout.
GPU_IMAGE_HAS = ("torch", "triton", "transformers", "peft", "accelerate", "lightning", "pytorch-lightning",
                 "nvidia-ml-py", "tensorboard", "pyarrow", "pandas", "numpy", "pyyaml", "requests", "matplotlib",
                 "scipy", "safetensors", "tokenizers", "huggingface-hub", "pillow", "sympy", "networkx", "jinja2",
                 "fsspec", "pytest", "nvidia-*")
# setuptools and wheel travel although the image has them: pip builds the project (`-e .`) in an isolated
# environment, which --no-index fills from the wheels directory only
CARRY_MIB = 64
# torch -> torchvision releases (PyTorch's compatibility table)
TORCHVISION = {"2.9": "0.24", "2.10": "0.25", "2.11": "0.26", "2.12": "0.27", "2.13": "0.28"}


def _dist_name(filename: str) -> str:
    return re.split(r"-\d", filename, maxsplit=1)[0].lower().replace("_", "-")


def prune(directory: str) -> tuple[list[str], int]:
    """Remove the wheels of packages the GPU image has; (what was removed, bytes left)."""
    import fnmatch

    removed = []
    for path in sorted(Path(directory).glob("*.whl")):
        name = _dist_name(path.name)
        if any(fnmatch.fnmatch(name, pattern) for pattern in GPU_IMAGE_HAS):
            path.unlink()
            removed.append(path.name)
    return removed, sum(p.stat().st_size for p in Path(directory).iterdir() if p.is_file())


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(directory: str, installed: set[str] | None = None) -> list[str]:
    """The wheels in DIR whose distribution this Python has no version of (run.sh installs only these, with
    --no-deps): the GPU image's own packages are never replaced, so no version bound of a carried package
    (datasets' fsspec<=..., say) can make pip reach for a wheel that was pruned or never fetched."""
    if installed is None:
        from importlib.metadata import distributions

        installed = {_canonical(d.metadata["Name"] or "") for d in distributions()}
    else:
        installed = {_canonical(n) for n in installed}
    newest: dict[str, tuple[object, Path]] = {}  # one wheel a package: pip refuses two versions of one
    for path in sorted(Path(directory).glob("*.whl")):
        name = _canonical(_dist_name(path.name))
        if name in installed:
            continue
        version = _version(path.name.split("-")[1])
        if name not in newest or version > newest[name][0]:
            newest[name] = (version, path)
    return [str(path) for _, path in sorted(newest.values(), key=lambda vp: vp[1].name)]


def _version(text: str):
    try:
        from packaging.version import Version

        return (1, Version(text))
    except Exception:  # no packaging, or a version it cannot read: compare the text
        return (0, text)


def _not_torch(req: str) -> bool:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower() != "torch"


def project() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(data["dependencies"])
    for extra in EXTRAS:
        reqs += data["optional-dependencies"][extra]
    return [r for r in reqs + list(TOOLS) if _not_torch(r) and not r.startswith("deepspeed")]


def sdist(path: str) -> list[str]:
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if re.fullmatch(r"[^/]+/PKG-INFO", m.name))
        info = Parser().parsestr(tar.extractfile(member).read().decode())
    reqs = [r for r in info.get_all("Requires-Dist") or [] if "extra ==" not in r]
    return [r.split(";")[0].strip() for r in reqs if _not_torch(r)]


def standin(directory: str, version: str) -> Path:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    dist = f"torch-{version}"
    path = out / f"{dist}-py3-none-any.whl"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: fabric-harness\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


if __name__ == "__main__":
    cmd, *args = sys.argv[1:] or ["project"]
    if cmd == "project":
        print("\n".join(project()))
    elif cmd == "sdist":
        print("\n".join(sdist(args[0])))
    elif cmd == "standin":
        print(standin(args[0], args[1]))
    elif cmd == "torchvision":
        print(TORCHVISION[".".join(args[0].split(".")[:2])])
    elif cmd == "missing":
        for wheel in missing(args[0]):
            print(wheel)
    elif cmd == "prune":
        gone, left = prune(args[0])
        print(f"{len(gone)} wheels the GPU image already has removed; {left / 2**20:.1f} MiB left in {args[0]}"
              + (f" - more than the {CARRY_MIB} MiB the device machine carries" if left > CARRY_MIB << 20 else ""))
    else:
        sys.exit(f"error: unknown command {cmd!r}; allowed: project, sdist FILE, standin DIR VERSION, torchvision "
                 "TORCH_VERSION, prune DIR, missing DIR")
