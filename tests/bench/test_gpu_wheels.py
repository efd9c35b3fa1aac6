"""bench/gpu/wheel_reqs.py: the wheels the GPU image already has are dropped (the device machine carries
64 MiB with the checkout), the rest are kept; torchvision is paired with the torch version. In-process."""
from __future__ import annotations

from bench.gpu import wheel_reqs


def test_prune_keeps_only_what_the_gpu_image_lacks(tmp_path):
    keep = ["liger_kernel-0.8.5-py3-none-any.whl", "datasets-5.2.0-py3-none-any.whl",
            "torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl", "deepspeed-0.19.8-py3-none-any.whl",
            # the image has them, but pip's isolated build of the project (-e .) under --no-index reads only the
            # wheels directory: without them the install step failed at "No matching distribution: setuptools>=68"
            "setuptools-84.2.1-py3-none-any.whl", "wheel-0.48.0-py3-none-any.whl"]
    drop = ["transformers-5.24.0-py3-none-any.whl", "nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl",
            "huggingface_hub-1.2.0-py3-none-any.whl", "numpy-2.3.5-cp312-cp312-manylinux_2_28_x86_64.whl"]
    for name in keep + drop:
        (tmp_path / name).write_bytes(b"x" * 1000)
    removed, left = wheel_reqs.prune(str(tmp_path))
    assert sorted(removed) == sorted(drop) and left == 1000 * len(keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


def test_torchvision_pairs_with_torch():
    assert wheel_reqs.TORCHVISION["2.11"] == "0.26" and wheel_reqs.TORCHVISION["2.13"] == "0.28"


def test_missing_lists_only_what_this_python_lacks_one_version_each(tmp_path):
    # the install step installs these without dependencies: the image's own packages are never resolved against,
    # so datasets' fsspec<=2026.9.0 cannot send pip to a pruned fsspec wheel (a fake installed set, no pip)
    for name in ["datasets-5.2.0-py3-none-any.whl", "fsspec-2026.9.0-py3-none-any.whl",
                 "liger_kernel-0.8.5-py3-none-any.whl", "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl",
                 "torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl", "hjson-3.1.0-py3-none-any.whl",
                 "hjson-3.10.0-py3-none-any.whl", "setuptools-84.2.1-py3-none-any.whl"]:
        (tmp_path / name).write_bytes(b"x")
    installed = {"fsspec", "Torchvision", "setuptools", "Pydantic_Core"}
    got = [p.rsplit("/", 1)[1] for p in wheel_reqs.missing(str(tmp_path), installed)]
    assert got == ["datasets-5.2.0-py3-none-any.whl", "hjson-3.10.0-py3-none-any.whl",
                   "liger_kernel-0.8.5-py3-none-any.whl"]


def test_missing_reads_this_pythons_own_packages(tmp_path):
    (tmp_path / "pytest-1.0-py3-none-any.whl").write_bytes(b"x")  # the test runner is installed here
    (tmp_path / "no_such_dist_here-1.0-py3-none-any.whl").write_bytes(b"x")
    assert [p.rsplit("/", 1)[1] for p in wheel_reqs.missing(str(tmp_path))] == ["no_such_dist_here-1.0-py3-none-any.whl"]
