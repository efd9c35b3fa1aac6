"""Image classification (MLPerf ResNet-50) with torchvision models, trained in full. Model code is single-device.

The model is `torchvision.models.get_model(model.arch, num_classes=data.num_classes)` with random init, or,
when model.config is a mapping, torchvision's `ResNet` class with those arguments (a small model of the
same family for CPU tests). ResNet-family models start with the last batch-norm gamma of every residual
block at zero (torchvision's `zero_init_residual=True`), as MLPerf's ResNet-50 v1.5 does; torchvision's
resnet50 is v1.5 (stride 2 in the bottleneck's 3x3 convolution).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..compat import ensure_torchvision_importable
from ..data.images import build_image_datasets, normalize, normalize_constants
from .hf import ModelError
from .contract import WorkloadDefaults

RESIDUAL_FAMILIES = ("resnet", "resnext", "wide_resnet")  # builders that take zero_init_residual
CONFIG_KEYS = ("block", "layers", "groups", "width_per_group", "replace_stride_with_dilation")


def _share_batchnorm_statistics(group):
    """A forward hook: after a training forward, every rank of `group` takes its rank 0's floating-point
    buffers (batch-norm running mean and variance), in one broadcast."""

    def hook(module: torch.nn.Module, args, output) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return  # evaluation forwards do not update the statistics
        buffers = [b for b in module.buffers() if b.is_floating_point()]
        if not buffers:
            return
        flat = torch.cat([b.detach().reshape(-1).float() for b in buffers])
        dist.broadcast(flat, group=group, group_src=0)
        offset = 0
        for b in buffers:
            # through .data: batch norm keeps its running statistics among the tensors saved for backward
            # and autograd refuses an in-place change it can see, although a training-mode backward
            # uses only the batch's own statistics (saved separately) and never these
            b.data.copy_(flat[offset:offset + b.numel()].view_as(b))
            offset += b.numel()

    return hook


class ImageClassificationWorkload(WorkloadDefaults):
    loss_terms = (("loss", "images"),)
    has_tokens = False
    accuracy = "top-1"
    peak_ops = "conv"  # fp32 math here is cuDNN's convolutions: their TF32 switch picks the MFU peak

    def __init__(self, recipe, device: torch.device, weight_dtype: torch.dtype):
        self.recipe, self.device = recipe, device
        # Full training keeps fp32 master weights (autocast gives bf16 compute on GPU); "auto" would
        # otherwise mean bf16 weights on GPU, which suits a frozen LoRA base, not LARS updates.
        self.weight_dtype = torch.float32 if recipe.model.dtype == "auto" else weight_dtype
        self.channels_last = device.type == "cuda"  # cuDNN's fast NHWC kernels; no gain on CPU
        if device.type == "cuda":
            # fixed shapes: cuDNN times its algorithms once per shape and keeps the fastest (the choice may
            # differ between runs, so GPU runs are not bitwise repeatable; CPU runs are untouched)
            torch.backends.cudnn.benchmark = True
        self._constants: tuple[torch.Tensor, ...] | None = None  # normalisation's, on the batches' device
        if not ensure_torchvision_importable():
            minor = int(torch.__version__.split(".")[1])
            raise ModelError(f"model.arch: {recipe.model.arch!r} needs torchvision, which is not installed; "
                             f"install the version matching torch {torch.__version__} without touching torch: "
                             f"pip install torchvision==0.{minor + 15}.* --no-deps (torch 2.N pairs with "
                             "torchvision 0.N+15; it also needs pillow)")
        self._check_model()

    # ------------------------------------------------------------ model

    def _check_model(self) -> None:
        import torchvision.models as tvm

        m = self.recipe.model
        if m.config is not None:
            unknown = sorted(set(m.config) - set(CONFIG_KEYS))
            if unknown:
                raise ModelError(f"model.config: unknown ResNet argument(s) {', '.join(unknown)}; "
                                 f"allowed: {', '.join(CONFIG_KEYS)}")
            if m.config.get("block") not in ("bottleneck", "basic"):
                raise ModelError(f"model.config.block: got {m.config.get('block')!r}; allowed: bottleneck, basic")
            layers = m.config.get("layers")
            if (not isinstance(layers, list) or len(layers) != 4
                    or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in layers)):
                raise ModelError(f"model.config.layers: got {layers!r}; expected four block counts >= 1, "
                                 "e.g. [3, 4, 6, 3] for ResNet-50")
            return
        known = tvm.list_models(module=tvm)
        if m.arch not in known:
            resnets = [n for n in known if n.startswith(RESIDUAL_FAMILIES)]
            raise ModelError(f"model.arch: {m.arch!r} is not a torchvision classification model; allowed: "
                             f"{', '.join(resnets)} or any of torchvision.models.list_models() "
                             f"({len(known)} in all), or a model.config mapping for a custom ResNet")

    def _construct(self) -> torch.nn.Module:
        """The model in fp32 on the current default device (the caller may make that meta)."""
        from torchvision.models import get_model
        from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

        m, classes = self.recipe.model, self.recipe.data.num_classes
        if m.config is not None:
            args = dict(m.config)
            block = Bottleneck if args.pop("block") == "bottleneck" else BasicBlock
            try:
                return ResNet(block, args.pop("layers"), num_classes=classes, zero_init_residual=True, **args)
            except (TypeError, ValueError) as exc:
                raise ModelError(f"model.config: not a valid torchvision ResNet: {exc}") from None
        extra = {"zero_init_residual": True} if m.arch.startswith(RESIDUAL_FAMILIES) else {}
        return get_model(m.arch, weights=None, num_classes=classes, **extra)

    def build_model(self) -> torch.nn.Module:
        """Randomly initialised, identical on every rank for the same seed."""
        torch.manual_seed(self.recipe.seed)
        model = self._construct().to(device=self.device, dtype=self.weight_dtype)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def build_data(self, need_eval: bool):
        return build_image_datasets(self.recipe.data, self.recipe.seed, need_eval)

    def parallelize(self, model, dims, device: torch.device, compute_dtype: torch.dtype) -> torch.nn.Module:
        from ..parallelize import apply_data_parallel

        # Batch-norm running statistics are buffers each rank updates from its own micro-batches. Every
        # rank takes rank 0's right after each training forward, so the replicas hold one set of statistics
        # at all times: evaluation runs the same model on every rank whatever the dp degree, and a
        # checkpoint (which stores one rank's copy of a replicated buffer) is the same whichever rank wrote
        # it, so a resumed run evaluates like an uninterrupted one. DDP's own buffer sync
        # (sync_buffers=True) broadcasts *before* a forward, which leaves each rank's statistics one
        # micro-batch apart at every step's end (a resumed run's eval loss then moved by 3e-3 in a test);
        # FSDP2 has no buffer sync at all. Hence one broadcast after the forward instead, for both.
        if dims.layout.dp > 1:
            model.register_forward_hook(_share_batchnorm_statistics(dims.dp_group))
        return apply_data_parallel(model, dims, self.recipe.parallel.data_parallel, device, compute_dtype,
                                   sync_buffers=False)

    # ------------------------------------------------------------ FLOPs

    def measure_flops(self) -> tuple[float, float]:
        """(forward, backward) model FLOPs per training image, measured by torch's FlopCounterMode on the
        meta device (no memory, no compute) for the architecture build_model makes, on two images
        (training-mode batch norm needs more than one value per channel) and halved: FLOPs are linear in
        the batch. Convolutions and matmuls count 2 FLOPs per multiply-add; batch norm, activations and
        pooling are not counted (the convention behind ResNet-50's 4.1 GMACs)."""
        from torch.utils.flop_counter import FlopCounterMode

        s = self.recipe.data.image_size
        with torch.device("meta"):
            meta = self._construct()
        images = torch.empty(2, 3, s, s, device="meta")
        with FlopCounterMode(display=False) as counter:
            out = meta(images)
        forward = counter.get_total_flops() / 2
        with FlopCounterMode(display=False) as counter:
            out.float().sum().backward()
        return forward, counter.get_total_flops() / 2

    def flops(self, model: torch.nn.Module) -> tuple[float, str, str]:
        """Model FLOPs per training image: forward + backward as measured (measure_flops)."""
        forward, backward = self.measure_flops()
        s = self.recipe.data.image_size
        formula = (f"measured with torch.utils.flop_counter.FlopCounterMode per {s}x{s} training image: "
                   f"forward {forward / 1e9:.4g} + backward {backward / 1e9:.4g} GFLOP (convolutions and "
                   "matmuls at 2 FLOPs per multiply-add; batch norm, activations, pooling not counted)")
        return float(forward + backward), "sample", formula

    # ------------------------------------------------------------ loss

    def describe(self, train_set) -> str:
        d, m = self.recipe.data, self.recipe.model
        model = (f"{m.arch} (torchvision ResNet, {m.config['block']} blocks {m.config['layers']})" if m.config
                 else f"{m.arch} (torchvision)")
        source = ("synthetic: random pixels and labels, compute and communication real, accuracy meaningless"
                  if d.synthetic else f"ImageFolder {d.dataset}")
        decode = f"{d.workers} decoding threads" if d.workers else "decoded in the trainer"
        return (f"{model}, {d.num_classes} classes at {d.image_size}x{d.image_size}; {len(train_set):,} "
                f"training images ({source}); {decode}")

    def _images(self, batch: dict) -> torch.Tensor:
        """The model's input from the batch's uint8 pixels, already on the device: channels-last first (a
        copy of 1-byte pixels, not 4-byte floats), then normalised there (data.images.normalize)."""
        pixels = batch["images"]
        if pixels.dtype != torch.uint8:
            raise TypeError(f"image batches are uint8 pixels (data.images); got {pixels.dtype}")
        if self.channels_last:
            pixels = pixels.contiguous(memory_format=torch.channels_last)
        if self._constants is None or self._constants[0].device != pixels.device:
            self._constants = normalize_constants(pixels.device)  # once, not per step
        return normalize(pixels, self._constants)

    def _logits(self, model: torch.nn.Module, batch: dict) -> torch.Tensor:
        return model(self._images(batch)).float()

    def loss_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        logits = self._logits(model, batch)
        return {"loss": F.cross_entropy(logits, batch["labels"], reduction="sum",
                                        label_smoothing=self.recipe.train.label_smoothing)}

    def eval_sums(self, model: torch.nn.Module, batch: dict) -> dict:
        logits = self._logits(model, batch)
        labels = batch["labels"]
        n = labels.numel()
        return {"loss": (F.cross_entropy(logits, labels, reduction="sum"), n),
                "accuracy": ((logits.argmax(dim=1) == labels).sum(), n)}

    @staticmethod
    def loss_counts(batch: dict) -> dict:
        return {"images": int(batch["labels"].numel())}

    @staticmethod
    def input_tokens(batch: dict) -> int:
        return 0  # has_tokens is False: the loop never asks
