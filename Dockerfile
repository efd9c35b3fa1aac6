# NGC PyTorch 26.09 (the newest tag confirmed on 2026-11-23): Ubuntu 24.04, Python 3.12, CUDA 13.4,
# torch 2.14.0a0+b2c75dd062.nv26.09, NCCL 2.31 as reported for this tag - check inside with
#   python -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"
# The image keeps NGC's torch, CUDA and NCCL builds: the project asks for torch>=2.11.0a0 (its floor: an NGC
# image with torch 2.11 or newer, trainer/torch_floor.py), which NGC's pre-release versions satisfy
# (tests/launch/test_container.py), NGC's pip constraints file pins them, and the install step below
# fails the build if torch changed anyway. Running it: docs/containers.md.
FROM nvcr.io/nvidia/pytorch:26.09-py3
WORKDIR /workspace/fabric-harness
COPY . .
# Versions read from the installed metadata (no torch import, no GPU needed at build time).
RUN python -c "import importlib.metadata as m; print(m.version('torch'))" > /tmp/torch.before \
 && pip install --no-cache-dir -e . \
 && python -c "import importlib.metadata as m; print(m.version('torch'))" > /tmp/torch.after \
 && cmp /tmp/torch.before /tmp/torch.after \
 && rm /tmp/torch.before /tmp/torch.after
ENV HF_HUB_OFFLINE=1
CMD ["python", "-m", "trainer", "--help"]
