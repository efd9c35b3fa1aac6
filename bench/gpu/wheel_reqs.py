"""Helpers for fetch_wheels.sh (no torch needed):
  python bench/gpu/wheel_reqs.py project            the project's requirements and extras run.sh installs, one a line
  python bench/gpu/wheel_reqs.py sdist FILE.tar.gz  an sdist's own requirements (its PKG-INFO), one a line
  python bench/gpu/wheel_reqs.py standin DIR VER    an empty torch wheel of version VER in DIR
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
    else:
        sys.exit(f"error: unknown command {cmd!r}; allowed: project, sdist FILE, standin DIR VERSION")
