"""Image classification: ImageFolder and synthetic data, transforms, FLOPs, and real runs on gloo.

The ImageFolder trees are generated here with PIL: a few classes of solid colours with noise, distinguishable
whatever the crop or flip. Runs use recipes/tiny_resnet.yaml (a tiny bottleneck ResNet at 32x32).
"""
from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.compat import ensure_torchvision_importable

from ..conftest import REPO, run_cli

if not ensure_torchvision_importable():
    pytest.skip("torchvision is not installed (pip install torchvision --no-deps)", allow_module_level=True)

from trainer.data.images import (CROP_RATIO, CROP_SCALE, MEAN, STD, FolderImages, SyntheticImages,  # noqa: E402
                                 build_image_datasets, crop_box, normalize)
from trainer.data.sft import DataError  # noqa: E402

TINY = str(REPO / "recipes" / "tiny_resnet.yaml")
COLOURS = [(220, 40, 40), (40, 200, 60), (50, 70, 220), (230, 210, 40)]
FAST = ["distributed.timeout_s=60", "train.log_every=1"]


def make_tree(root, classes: int = 4, train: int = 16, val: int = 8, seed: int = 0):
    """root/train/<class>/*.png and root/val/<class>/*.png: solid colour per class, noise, varied sizes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("val", val)):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(count):
                h, w = int(rng.integers(36, 56)), int(rng.integers(36, 56))
                pixels = np.clip(np.array(COLOURS[c]) + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{split}_{c}_{i}.png")
    return root


def data_cfg(**kw):
    base = dict(dataset="", synthetic=False, synthetic_samples=64, image_size=32, num_classes=4, workers=0,
                max_train_samples=None, max_eval_samples=None, split_seed=1234)
    return SimpleNamespace(**{**base, **kw})


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("imagefolder"))


# ---------------------------------------------------------------- data

def test_image_folder_loads_classes_shapes_and_uint8_pixels(tree):
    train, evals = build_image_datasets(data_cfg(dataset=str(tree)), seed=1, need_eval=True)
    assert isinstance(train, FolderImages) and (len(train), len(evals)) == (64, 32)
    assert sorted({label for _, label in train.samples}) == [0, 1, 2, 3]
    assert all(f"class{label}" in path for path, label in train.samples + evals.samples)
    for data in (train, evals):
        batch = data.batch([0, 17, 40, 63] if data is train else [0, 9, 18, 31])
        assert batch["images"].shape == (4, 3, 32, 32) and batch["images"].dtype == torch.uint8
        assert batch["labels"].dtype == torch.int64
        # a solid-colour class stays its colour through crop, flip and resize: normalised by ImageNet stats
        for img, label in zip(normalize(batch["images"]), batch["labels"]):
            expected = (torch.tensor(COLOURS[label]) / 255 - torch.tensor(MEAN)) / torch.tensor(STD)
            assert img.mean(dim=(1, 2)) == pytest.approx(expected.tolist(), abs=0.15)


def test_eval_transform_is_torchvisions_resize_and_center_crop(tree):
    from PIL import Image
    from torchvision import transforms

    _, evals = build_image_datasets(data_cfg(dataset=str(tree)), seed=1, need_eval=True)
    reference = transforms.Compose([transforms.Resize(37), transforms.CenterCrop(32), transforms.ToTensor(),
                                    transforms.Normalize(MEAN, STD)])  # 32 * 256 / 224 = 36.6 -> 37
    for i in (0, 13):
        with Image.open(evals.samples[i][0]) as img:
            want = reference(img.convert("RGB"))
        assert torch.allclose(normalize(evals.batch([i])["images"])[0], want, atol=1e-5)


def test_random_resized_crop_boxes_stay_in_the_standard_ranges():
    rng = np.random.default_rng(0)
    for width, height in ((100, 80), (40, 300), (500, 375)):
        for _ in range(200):
            top, left, h, w = crop_box(width, height, rng)
            assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
            assert CROP_SCALE[0] * 0.9 <= h * w / (width * height) <= CROP_SCALE[1]
            assert CROP_RATIO[0] * 0.9 <= w / h <= CROP_RATIO[1] * 1.1  # rounding to whole pixels
    # an extreme aspect never fits: the central crop clamped to the ratio range
    assert crop_box(1000, 10, rng) == (0, 493, 10, 13)


def test_training_batches_are_the_same_with_any_number_of_decoding_threads(tree):
    serial, _ = build_image_datasets(data_cfg(dataset=str(tree)), seed=1, need_eval=False)
    threaded, _ = build_image_datasets(data_cfg(dataset=str(tree), workers=3), seed=1, need_eval=False)
    idx = list(range(0, 64, 5))
    torch.manual_seed(7)
    a = serial.batch(idx)
    torch.manual_seed(7)  # the crops follow the process's torch RNG: restored on resume
    b = threaded.batch(idx)
    assert torch.equal(a["images"], b["images"]) and torch.equal(a["labels"], b["labels"])
    assert not torch.equal(serial.batch(idx)["images"], a["images"])  # the next batch draws new crops


def _in_process(out, *overrides) -> list[dict]:
    """The CLI in this process (a gloo group of one), its metrics; os.environ as it was before."""
    from trainer.cli import main

    saved = dict(os.environ)  # the run sets HF_HUB_OFFLINE, GLOO_SOCKET_IFNAME, flight-recorder variables
    try:
        assert main([TINY, f"output_dir={out}", *overrides]) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_resume_draws_the_crops_the_uninterrupted_run_drew(tmp_path):
    """A step builds the next step's batches ahead of time, and a training image's crops draw from torch's
    RNG: a checkpoint of the RNG taken after that draw made the resumed run's next step draw other crops
    (step 3's loss 1.2314 against 1.2374). The checkpoint holds the streams from before the draw."""
    root = make_tree(tmp_path / "data", train=8, val=2)
    run = ["data.synthetic=false", f"data.dataset={root}", "data.num_classes=4", "max_steps=4",
           "train.eval_every_samples=null", "train.save_final=false", "distributed.timeout_s=60"]
    whole = _in_process(tmp_path / "whole", *run, "train.save_every=2")
    resumed = _in_process(tmp_path / "resumed", *run,
                          f"train.resume={tmp_path / 'whole' / 'checkpoints' / 'step-0000002'}")
    keys = ("step", "loss", "grad_norm")
    assert [{k: r[k] for k in keys} for r in resumed] == [{k: r[k] for k in keys} for r in whole[2:]]  # bit for bit


def test_sample_caps_keep_a_seeded_subset_of_all_classes(tree):
    train, evals = build_image_datasets(data_cfg(dataset=str(tree), max_train_samples=12, max_eval_samples=5),
                                        seed=1, need_eval=True)
    assert (len(train), len(evals)) == (12, 5)
    assert len({label for _, label in train.samples}) > 1  # not just the first class folder


def test_val_classes_keep_train_indices(tmp_path):
    root = make_tree(tmp_path / "t", classes=3, train=2, val=1)
    shutil.rmtree(root / "val" / "class0")  # val lacks a class: the others keep train's indices
    _, evals = build_image_datasets(data_cfg(dataset=str(root)), seed=1, need_eval=True)
    assert sorted(label for _, label in evals.samples) == [1, 2]


@pytest.mark.parametrize("layout,expected", [
    ("missing", "data.dataset: path '{root}' does not exist; expected an ImageFolder directory"),
    ("no_val", "data.dataset: '{root}' has no val/ subdirectory; expected train/<class>/<image> and "
               "val/<class>/<image> (ImageNet layout); found: train/"),
    ("flat_train", "data.dataset: '{root}/train' holds no class subdirectories; expected train/<class>/<image>"),
    ("no_images", "data.dataset: '{root}/train' holds no images (.jpg, .jpeg, .png"),
    ("extra_val_class", "data.dataset: '{root}/val' has class folders that train/ lacks: stray"),
    ("too_many_classes", "data.num_classes: 2 is fewer than the 4 class folders in '{root}/train'"),
])
def test_bad_layouts_say_what_is_wrong_and_what_was_found(layout, expected, tmp_path):
    from PIL import Image

    root = tmp_path / "data"
    cfg = data_cfg(dataset=str(root))
    if layout != "missing":
        make_tree(root, train=1, val=1)
    if layout == "no_val":
        shutil.rmtree(root / "val")
    elif layout == "flat_train":
        shutil.rmtree(root / "train")
        (root / "train").mkdir()
        Image.new("RGB", (8, 8)).save(root / "train" / "a.png")
    elif layout == "no_images":
        for p in (root / "train").rglob("*.png"):
            p.rename(p.with_suffix(".txt"))
    elif layout == "extra_val_class":
        (root / "val" / "stray").mkdir()
    elif layout == "too_many_classes":
        cfg.num_classes = 2
    with pytest.raises(DataError) as err:
        build_image_datasets(cfg, seed=1, need_eval=True)
    message = str(err.value)
    assert "\n" not in message and expected.format(root=root) in message, message


def test_synthetic_images_are_deterministic_per_index():
    a = SyntheticImages(16, 32, 10, seed=3, split=0)
    b = SyntheticImages(16, 32, 10, seed=3, split=0, workers=2)
    batch = a.batch([5, 1, 5])
    assert batch["images"].shape == (3, 3, 32, 32) and batch["labels"].dtype == torch.int64
    assert torch.equal(batch["images"][0], batch["images"][2])  # index 5, twice
    assert torch.equal(batch["images"], b.batch([5, 1, 5])["images"])  # any instance, any threads
    assert torch.equal(batch["labels"], b.batch([5, 1, 5])["labels"])
    assert not torch.equal(a.image(5), SyntheticImages(16, 32, 10, seed=4, split=0).image(5))
    assert not torch.equal(a.image(5), SyntheticImages(16, 32, 10, seed=3, split=1).image(5))  # eval differs
    pixels = a.image(0)
    assert pixels.dtype == torch.uint8 and int(pixels.min()) <= 2 and int(pixels.max()) >= 253  # all of 0..255
    assert 0 <= int(a.labels.min()) and int(a.labels.max()) < 10
    train, evals = build_image_datasets(data_cfg(synthetic=True, synthetic_samples=64), seed=3, need_eval=True)
    assert (len(train), len(evals)) == (64, 16)  # the eval set is a quarter


# ---------------------------------------------------------------- model and FLOPs

def workload(*overrides):
    from trainer.config import load_recipe
    from trainer.workloads.image import ImageClassificationWorkload

    recipe = load_recipe(str(REPO / "recipes" / "resnet50.yaml"), list(overrides))
    return ImageClassificationWorkload(recipe, torch.device("cpu"), torch.float32)


def test_resnet50_flops_are_measured_as_the_published_4_1_gmacs():
    from torchvision.models import ResNet50_Weights

    wl = workload()
    forward, backward = wl.measure_flops()
    # torchvision's model card gives 4.089 G multiply-adds per 224x224 image; 2 FLOPs each. Tolerance 0.5%:
    # the count is exact for convolutions and the classifier; the card rounds to 4 digits.
    assert forward == pytest.approx(2e9 * ResNet50_Weights.IMAGENET1K_V1.meta["_ops"], rel=5e-3)
    assert forward == pytest.approx(8.18e9, rel=5e-3)
    # backward = input gradients + weight gradients, each a forward's worth, except the first convolution's
    # input gradient (the image needs none): just under 2x
    assert 1.95 * forward < backward < 2.0 * forward
    per, unit, formula = wl.flops(None)
    assert unit == "sample" and per == forward + backward
    assert "FlopCounterMode" in formula and "224x224" in formula


def test_resnet50_is_torchvisions_v1_5_with_zero_init_residual_bn():
    wl = workload()
    with torch.device("meta"):
        model = wl._construct()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # ResNet-50, 1000 classes
    block = model.layer2[0]
    assert block.conv2.stride == (2, 2) and block.conv1.stride == (1, 1)  # v1.5: stride in the 3x3
    tiny = workload("model.config={block: bottleneck, layers: [1, 1, 1, 1], width_per_group: 16}",
                    "data.num_classes=10")
    torch.manual_seed(0)
    model = tiny._construct()
    assert all(not m.bn3.weight.detach().any() for m in model.modules() if hasattr(m, "bn3"))
    first, again = tiny.build_model().state_dict(), tiny.build_model().state_dict()
    assert all(torch.equal(v, again[k]) for k, v in first.items())  # seeded: the same on every rank


@pytest.mark.parametrize("override,expected", [
    ("model.arch=resnet5", "model.arch: 'resnet5' is not a torchvision classification model; allowed: "
                           "resnet101, resnet152, resnet18"),
    ("model.config={block: bottleneck, layers: [1, 1, 1, 1], depth: 3}",
     "model.config: unknown ResNet argument(s) depth; allowed: block, layers"),
    ("model.config={block: dense, layers: [1, 1, 1, 1]}", "model.config.block: got 'dense'; allowed: bottleneck"),
    ("model.config={block: basic, layers: [1, 1]}", "model.config.layers: got [1, 1]; expected four"),
])
def test_bad_models_fail_with_one_line(override, expected):
    from trainer.error_report import InputError

    with pytest.raises(InputError) as err:
        workload(override)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_missing_torchvision_says_how_to_install_it(monkeypatch):
    from trainer.workloads import image

    monkeypatch.setattr(image, "ensure_torchvision_importable", lambda: False)
    with pytest.raises(image.ModelError) as err:
        workload()
    minor = int(torch.__version__.split(".")[1])
    assert "model.arch: 'resnet50' needs torchvision" in str(err.value)
    assert f"pip install torchvision==0.{minor + 15}.* --no-deps" in str(err.value)


# ---------------------------------------------------------------- uint8 batches, normalised in the step

def tiny_workload(*overrides, device=torch.device("cpu")):
    from trainer.config import load_recipe
    from trainer.workloads.image import ImageClassificationWorkload

    return ImageClassificationWorkload(load_recipe(TINY, list(overrides)), device, torch.float32)


@pytest.mark.parametrize("source", ["folder", "synthetic"])
def test_uint8_batches_normalised_in_the_step_give_the_fp32_paths_losses(tree, source):
    """The data sets send uint8 pixels; the workload normalises them on the device. Against the former
    path (the same pixels normalised to fp32 on the host, the model fed those): equal losses, bit for bit,
    with the crops and flips of a training batch drawn as before, at a quarter of the bytes."""
    import torch.nn.functional as F

    cfg = data_cfg(dataset=str(tree)) if source == "folder" else data_cfg(synthetic=True, num_classes=4)
    train, evals = build_image_datasets(cfg, seed=1, need_eval=True)
    wl = tiny_workload("data.num_classes=4")
    model = wl.build_model()
    idx = [3, 17, 29, 40, 51, 60, 8, 1]
    torch.manual_seed(7)
    batch = train.batch(idx)
    if source == "folder":  # the augmentation is untouched: the per-batch seed from the torch RNG, as before
        torch.manual_seed(7)
        seed = train._batch_seed()
        assert torch.equal(batch["images"], torch.stack([train.pixels(i, seed) for i in idx]))
    mean, std = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    fp32 = (batch["images"].float().div_(255.0) - mean).div_(std)  # what the host used to send
    assert batch["images"].dtype == torch.uint8 and batch["images"].nbytes * 4 == fp32.nbytes
    smoothing = wl.recipe.train.label_smoothing
    loss = wl.loss_sums(model, batch)["loss"]
    assert torch.equal(loss, F.cross_entropy(model(fp32).float(), batch["labels"], reduction="sum",
                                             label_smoothing=smoothing))
    model.eval()
    eval_batch = evals.batch([0, 5, 9, 13])
    with torch.no_grad():
        sums = wl.eval_sums(model, eval_batch)
        want = model(normalize(eval_batch["images"])).float()
    assert torch.equal(sums["loss"][0], F.cross_entropy(want, eval_batch["labels"], reduction="sum"))
    assert torch.equal(sums["accuracy"][0], (want.argmax(dim=1) == eval_batch["labels"]).sum())


def test_channels_last_input_is_the_same_values_in_nhwc(tree):
    # the CUDA layout, checked on the CPU: the uint8 pixels go channels-last first, the values stay
    train, _ = build_image_datasets(data_cfg(dataset=str(tree)), seed=1, need_eval=False)
    wl = tiny_workload("data.num_classes=4")
    wl.channels_last = True
    batch = train.batch([2, 9, 33])
    images = wl._images(batch)
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, normalize(batch["images"]))
    with pytest.raises(TypeError, match="image batches are uint8 pixels"):
        wl._images({"images": normalize(batch["images"])})  # an already-normalised batch is refused


def test_cudnn_benchmark_is_turned_on_for_cuda_runs_only(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)  # restored after the test
    tiny_workload()
    assert torch.backends.cudnn.benchmark is False  # CPU runs: untouched
    wl = tiny_workload(device=torch.device("cuda", 0))  # the constructor only sets flags: no GPU needed
    assert torch.backends.cudnn.benchmark is True and wl.channels_last and wl.peak_ops == "conv"


# ---------------------------------------------------------------- runs through the CLI and torchrun

@pytest.mark.integration
def test_bad_image_folder_exits_2_with_one_line_through_the_cli(tmp_path):
    make_tree(tmp_path / "data", train=1, val=1)
    shutil.rmtree(tmp_path / "data" / "val")
    res = run_cli(tmp_path / "run", *FAST, "data.synthetic=false", f"data.dataset={tmp_path / 'data'}",
                  "data.num_classes=4", recipe=TINY)
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "has no val/ subdirectory" in errors[0] and "found: train/" in errors[0]
    assert "Traceback" not in res.stderr
    assert json.loads((tmp_path / "run" / "run.json").read_text())["exit_code"] == 2


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """recipes/tiny_resnet.yaml as shipped: 2 ranks x micro-batch 8, global batch 16, 20 steps."""
    res = run_cli(tmp_path_factory.mktemp("tiny") / "run", "distributed.timeout_s=60", nproc=2, recipe=TINY)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.mark.integration
def test_tiny_recipe_runs_on_two_ranks_with_eval_accuracy(two_ranks):
    res = two_ranks
    rows = res.metrics()
    assert [r["step"] for r in rows] == list(range(1, 21))
    for r in rows:
        assert r["images"] == 16 and r["tokens_per_s"] is None and r["tokens"] is None
        assert r["loss"] > 0 and r["samples_per_s"] > 0 and r["tflops_per_device"] > 0
    evals = [r for r in rows if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [10, 20]
    assert all(0 <= r["eval_accuracy"] <= 1 and r["eval_loss"] > 0 for r in evals)
    info = res.run_json()
    assert info["status"] == "completed" and info["layout"]["dp"] == 2 and info["data"]["synthetic"] is True
    assert info["data"]["eval_accuracy_is"] == "top-1" and info["throughput"]["flops_per_sample"] > 0
    ranks = res.rank_files()  # DDP kept the replicas identical
    assert len(ranks) == 2 and ranks[0]["trainable"]["sha256"] == ranks[1]["trainable"]["sha256"]
    assert "eval_acc" in res.stdout and "step 20/20" in res.stdout


@pytest.mark.integration
def test_two_ranks_equal_one_process_accumulating_the_same_micro_batches(two_ranks, tmp_path):
    """dp 2 x micro-batch 8 against one process x micro-batch 8 x grad-accum 2, same global batch of 16:
    every micro-batch holds the same 8 images, so batch norm normalises over the same samples."""
    single = run_cli(tmp_path / "single", *FAST, "train.eval_every_samples=null", "train.save_final=false",
                     recipe=TINY)
    assert single.returncode == 0, single.stderr[-3000:]
    assert single.run_json()["layout"]["grad_accum_steps"] == 2
    a, b = single.losses(), two_ranks.losses()
    assert len(a) == len(b) == 20 and b[0] == pytest.approx(a[0], abs=1e-5)
    assert b == pytest.approx(a, rel=1e-5)  # stated tolerance: 1e-5 relative over all 20 steps
    assert [r["grad_norm"] for r in two_ranks.metrics()] == pytest.approx(
        [r["grad_norm"] for r in single.metrics()], rel=1e-5)


@pytest.mark.integration
def test_resumed_run_trains_and_evaluates_like_an_uninterrupted_one(two_ranks, tmp_path):
    """Batch-norm statistics are rank 0's on every rank after each forward, so the checkpoint holds the
    job's statistics whichever rank wrote them: eval after resume equals the uninterrupted run's."""
    out = tmp_path / "resumed"
    crashed = run_cli(out, "distributed.timeout_s=60", "train.save_every=10", nproc=2, recipe=TINY,
                      env={"FABRIC_HARNESS_CRASH_AFTER_STEP": "10"})
    assert crashed.returncode != 0 and [r["step"] for r in crashed.metrics()] == list(range(1, 11))
    resumed = run_cli(out, "distributed.timeout_s=60", "train.save_every=10", nproc=2, recipe=TINY)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "at step 10" in resumed.stdout
    keys = ("step", "loss", "grad_norm", "eval_loss", "eval_accuracy")
    assert ([{k: r.get(k) for k in keys} for r in resumed.metrics()]
            == [{k: r.get(k) for k in keys} for r in two_ranks.metrics()])  # bit for bit


@pytest.mark.integration
def test_short_run_on_an_image_folder_learns(tmp_path):
    root = make_tree(tmp_path / "data")
    res = run_cli(tmp_path / "run", *FAST, "data.synthetic=false", f"data.dataset={root}", "data.num_classes=4",
                  "data.workers=2", "max_steps=16", "train.eval_every_samples=128", "train.save_final=false",
                  recipe=TINY)
    assert res.returncode == 0, res.stderr[-3000:]
    evals = [r for r in res.metrics() if "eval_accuracy" in r]
    assert [r["step"] for r in evals] == [8, 16]
    assert evals[-1]["eval_accuracy"] >= 0.5, evals  # chance is 0.25 over 4 classes
    assert res.run_json()["data"] == {"train_samples": 64, "eval_samples": 32, "synthetic": False,
                                      "eval_accuracy_is": "top-1"}
