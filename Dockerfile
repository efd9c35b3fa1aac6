# NGC PyTorch keeps its own torch, CUDA and NCCL builds: the project asks only for torch>=2.6.
FROM nvcr.io/nvidia/pytorch:25.01-py3
WORKDIR /workspace/fabric-harness
COPY . .
RUN pip install --no-cache-dir -e .
ENV HF_HUB_OFFLINE=1
CMD ["python", "-m", "trainer", "--help"]
