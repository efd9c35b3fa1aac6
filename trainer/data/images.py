"""Image-classification data: an ImageFolder tree (ImageNet layout) or synthetic images of the real shapes.

Sets expose len() and batch(indices) -> {"images": uint8 [N, 3, S, S], "labels": int64 [N]}, like
TokenizedSet. Batches stay uint8 pixels on the host - a quarter of the bytes of normalised fp32 to copy to
the device - and the workload normalises them where they land (`normalize`, on the device). Transforms are
the standard ImageNet ones the MLPerf ResNet-50 reference uses:

    train: random resized crop to S (area 8-100%, aspect 3/4-4/3), horizontal flip with p 0.5, normalize
    eval:  resize the shorter side to S*256/224, center crop S, normalize
    normalize: ImageNet mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225) on [0, 1] pixels

The random crop and flip of a training image are drawn from a generator seeded by (a per-batch seed taken
from the process's torch RNG, the image's index), not from torch's global RNG inside each transform: the
images of a batch are then decoded in any order, by any number of threads, and come out the same, and a
resumed run (which restores the torch RNG) sees the same crops as an uninterrupted one.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .sft import DataError

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CROP_SCALE = (0.08, 1.0)  # torchvision RandomResizedCrop's defaults, as the MLPerf reference uses
CROP_RATIO = (3 / 4, 4 / 3)
LAYOUT = "train/<class>/<image> and val/<class>/<image> (ImageNet layout)"


def normalize_constants(device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(255, mean, std) as float32 tensors on `device`, for `normalize`. Made once per run, not per step
    (on a GPU each is a copy from the host). 255 is a tensor too: CUDA divides by a host scalar as a
    multiplication by its reciprocal, which can differ from true division in the last bit."""
    return (torch.tensor(255.0, device=device), torch.tensor(MEAN, device=device).view(1, 3, 1, 1),
            torch.tensor(STD, device=device).view(1, 3, 1, 1))


def normalize(pixels: torch.Tensor, constants: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
    """uint8 [N, 3, H, W] -> float32 normalized with the ImageNet mean and std, on the pixels' device and in
    their memory format: the same three IEEE-rounded operations (true division, subtraction, division)
    wherever it runs, so a device computes what the host did. `constants`: normalize_constants(device)."""
    scale, mean, std = constants if constants is not None else normalize_constants(pixels.device)
    return (pixels.float().div_(scale) - mean).div_(std)


def crop_box(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a random resized crop: 10 tries at a random area fraction and
    log-uniform aspect ratio, else the largest central crop whose aspect lies within CROP_RATIO."""
    area = width * height
    log_lo, log_hi = math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*CROP_SCALE)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    ratio = width / height
    if ratio < CROP_RATIO[0]:
        w, h = width, int(round(width / CROP_RATIO[0]))
    elif ratio > CROP_RATIO[1]:
        h, w = height, int(round(height * CROP_RATIO[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class _ImageSet:
    """Shared batching: a batch's images are made one per index, on `workers` threads when above 0."""

    train = False

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None

    def _map(self, fn, items: list) -> list:
        if self.workers <= 0 or len(items) <= 1:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="decode")
        return list(self._pool.map(fn, items))

    def _batch_seed(self) -> int:
        # drawn on the calling thread: the process's torch RNG (seeded, checkpointed) orders the batches
        return int(torch.randint(0, 2 ** 62, (1,)).item()) if self.train else 0


class SyntheticImages(_ImageSet):
    """Deterministic random images and labels of the real shapes: image i is uniform random uint8 pixels
    from a generator seeded by (seed, split, i). For fabric-only comparisons: the step's compute and
    communication (and the host-to-device copy of uint8 batches) are real, the accuracy means nothing
    (labels are random)."""

    def __init__(self, size: int, image_size: int, num_classes: int, seed: int, split: int, workers: int = 0):
        super().__init__(workers)
        self.size, self.image_size, self.seed, self.split = size, image_size, seed, split
        self.labels = torch.from_numpy(np.random.default_rng([seed, split]).integers(0, num_classes, size=size))

    def __len__(self) -> int:
        return self.size

    def image(self, index: int) -> torch.Tensor:
        """uint8 [3, S, S]."""
        state = np.random.SeedSequence([self.seed, self.split, int(index)]).generate_state(2, dtype=np.uint32)
        gen = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
        return torch.randint(0, 256, (3, self.image_size, self.image_size), generator=gen, dtype=torch.uint8)

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = [int(i) for i in indices]
        return {"images": torch.stack(self._map(self.image, idx)), "labels": self.labels[idx]}


class FolderImages(_ImageSet):
    """Images listed as (path, label), decoded with PIL and transformed for training or evaluation."""

    def __init__(self, samples: list[tuple[str, int]], image_size: int, train: bool, workers: int = 0):
        super().__init__(workers)
        self.samples, self.image_size, self.train = samples, image_size, train
        self.resize_to = int(round(image_size * 256 / 224))  # eval: shorter side, then the center crop

    def __len__(self) -> int:
        return len(self.samples)

    def pixels(self, index: int, batch_seed: int = 0) -> torch.Tensor:
        """uint8 [3, S, S] of one image after the crop (and flip), before normalisation."""
        import torchvision.transforms.functional as TF
        from PIL import Image, UnidentifiedImageError

        path = self.samples[index][0]
        s = self.image_size
        try:
            with Image.open(path) as raw:
                img = raw.convert("RGB")  # ImageNet holds some grayscale and CMYK JPEGs
        except (OSError, UnidentifiedImageError) as exc:
            raise DataError(f"data.dataset: cannot decode image {path!r}: {exc}") from None
        if self.train:
            rng = np.random.default_rng([batch_seed, index])
            top, left, h, w = crop_box(img.width, img.height, rng)
            img = TF.resized_crop(img, top, left, h, w, [s, s])
            if rng.random() < 0.5:
                img = TF.hflip(img)
        else:
            img = TF.center_crop(TF.resize(img, [self.resize_to]), [s, s])
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = [int(i) for i in indices]
        seed = self._batch_seed()
        pixels = self._map(lambda i: self.pixels(i, seed), idx)
        labels = torch.tensor([self.samples[i][1] for i in idx], dtype=torch.long)
        return {"images": torch.stack(pixels), "labels": labels}  # uint8: normalised on the device


# ---------------------------------------------------------------- ImageFolder layout

def _listing(path: str, limit: int = 8) -> str:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return "nothing readable"
    if not names:
        return "nothing (empty)"
    shown = [n + ("/" if os.path.isdir(os.path.join(path, n)) else "") for n in names[:limit]]
    return ", ".join(shown) + (f", ... ({len(names)} entries)" if len(names) > limit else "")


def _split_dir(root: str, split: str) -> str:
    path = os.path.join(root, split)
    if not os.path.isdir(path):
        raise DataError(f"data.dataset: {root!r} has no {split}/ subdirectory; expected {LAYOUT}; "
                        f"found: {_listing(root)}")
    if not any(e.is_dir() for e in os.scandir(path)):
        raise DataError(f"data.dataset: {path!r} holds no class subdirectories; expected {LAYOUT}; "
                        f"found: {_listing(path)}")
    return path


def scan_folder(root: str, split: str, class_to_idx: dict[str, int] | None = None
                ) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """(path, label) of every image under root/split/<class>/, with torchvision's ImageFolder rules
    (sorted class folders, its image extensions). The val split takes train's class indices."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    path = _split_dir(root, split)
    classes, own = find_classes(path)
    if class_to_idx is None:
        class_to_idx = own
    else:
        unknown = [c for c in classes if c not in class_to_idx]
        if unknown:
            raise DataError(f"data.dataset: {path!r} has class folders that train/ lacks: "
                            f"{', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''}")
        class_to_idx = {c: class_to_idx[c] for c in classes}
    samples = make_dataset(path, class_to_idx, extensions=IMG_EXTENSIONS, allow_empty=True)
    if not samples:
        raise DataError(f"data.dataset: {path!r} holds no images ({', '.join(IMG_EXTENSIONS)}) in its class "
                        f"folders; expected {LAYOUT}; found in {classes[0]}/: "
                        f"{_listing(os.path.join(path, classes[0]))}")
    return samples, class_to_idx


def _cap(samples: list, limit: int | None, seed: int) -> list:
    """A seeded subset (ImageFolder lists class by class, so the first N would be a few classes only)."""
    if limit is None or limit >= len(samples):
        return samples
    keep = np.sort(np.random.default_rng(seed).permutation(len(samples))[:limit])
    return [samples[i] for i in keep]


def build_image_datasets(cfg, seed: int, need_eval: bool) -> tuple[_ImageSet, _ImageSet | None]:
    """Train set and (when asked for) eval set from the recipe's `data` section."""
    if cfg.synthetic:
        n_train = min(cfg.synthetic_samples, cfg.max_train_samples or cfg.synthetic_samples)
        n_eval = max(1, cfg.synthetic_samples // 4)
        n_eval = min(n_eval, cfg.max_eval_samples or n_eval)
        train = SyntheticImages(n_train, cfg.image_size, cfg.num_classes, seed, 0, cfg.workers)
        evals = SyntheticImages(n_eval, cfg.image_size, cfg.num_classes, seed, 1, cfg.workers) if need_eval else None
        return train, evals
    root = cfg.dataset
    if not os.path.exists(root):
        raise DataError(f"data.dataset: path {root!r} does not exist; expected an ImageFolder directory with "
                        f"{LAYOUT}, or data.synthetic=true")
    if not os.path.isdir(root):
        raise DataError(f"data.dataset: {root!r} is a file; expected an ImageFolder directory with {LAYOUT}")
    train_samples, class_to_idx = scan_folder(root, "train")
    if len(class_to_idx) > cfg.num_classes:
        raise DataError(f"data.num_classes: {cfg.num_classes} is fewer than the {len(class_to_idx)} class "
                        f"folders in {os.path.join(root, 'train')!r}; set data.num_classes={len(class_to_idx)}")
    train = FolderImages(_cap(train_samples, cfg.max_train_samples, cfg.split_seed), cfg.image_size, True,
                         cfg.workers)
    evals = None
    if need_eval:
        val_samples, _ = scan_folder(root, "val", class_to_idx)
        evals = FolderImages(_cap(val_samples, cfg.max_eval_samples, cfg.split_seed), cfg.image_size, False,
                             cfg.workers)
    return train, evals
