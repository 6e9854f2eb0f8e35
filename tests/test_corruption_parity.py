"""Parity of privreid's corruptions with the ``imagecorruptions`` package (CIL-ReID's), at pixel scale 1.

Skipped unless the package (``pip install -e '.[bench]'``) is installed.  The package needs the
compatibility patches of ``benchmarks/corruptions.py`` on current numpy / scikit-image (it is loaded
from there, so there is one copy of them).

Two kinds of check:

* exact: where privreid implements the package's algorithm step for step (glass blur's shuffle, the fog's
  plasma fractal), the package's numpy draws are replaced by the draws privreid makes, in the order it
  makes them, and the outputs must agree to float precision;
* strength: for the types drawn from other random sources (frost's textures) the mean absolute change of
  the image, over many images, must be within a few per cent of the package's.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from privreid.corruptions import corrupt
from privreid.corruptions.blur import GLASS
from privreid.corruptions.common import Context
from privreid.corruptions.weather import plasma_fractal

# imagecorruptions is in the test extra (make test installs it); its OpenCV needs the system's libGL
pytest.importorskip("cv2", reason="OpenCV (imagecorruptions' dependency) does not import here")


@pytest.fixture(scope="module")
def ic():
    """``imagecorruptions.corruptions``, patched to run on current libraries (benchmarks/corruptions.py)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "corruptions.py"
    spec = importlib.util.spec_from_file_location("privreid_bench_corruptions", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.import_imagecorruptions(patch=True)
    import imagecorruptions.corruptions as module

    return module


def person_crops(n: int, seed: int = 0) -> np.ndarray:
    """``n`` 128x64 uint8 RGB images with a figure-like structure (blocks of colour and stripes)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 128, 64, 3), dtype=np.uint8)
    for i in range(n):
        img = np.broadcast_to(rng.integers(60, 200, 3), (128, 64, 3)).astype(np.float64)
        for _ in range(4):
            y, x = rng.integers(0, 100), rng.integers(0, 48)
            img[y:y + rng.integers(10, 40), x:x + rng.integers(6, 20)] = rng.integers(0, 256, 3)
        img[::4] *= 0.8
        out[i] = img.clip(0, 255).astype(np.uint8)
    return out


def as_tensor(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div(255)


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_glass_blur_is_the_packages_shuffle_given_the_same_offsets(ic, monkeypatch, severity):
    """The package's sequential copy-scan (its tuple 'swap' of numpy views copies one pixel onto the other)."""
    image = person_crops(1, seed=severity)[0]
    seed = 100 + severity
    _, delta, iterations = GLASS[severity - 1]
    h, w = image.shape[:2]
    n = (h - 2 * delta) * (w - 2 * delta)
    g = torch.Generator().manual_seed(seed)
    offsets = []
    for _ in range(iterations):  # privreid's draws for one image, in its order
        drawn = torch.randint(-delta, delta, (2, n), generator=g)
        torch.rand((2, n), generator=g)  # the stochastic rounding draws (no effect at pixel scale 1)
        offsets += [(int(dx), int(dy)) for dy, dx in drawn.T.tolist()]
    feed = iter(offsets)

    def randint(low, high, size):
        assert (low, high, size) == (-delta, delta, (2,))
        return np.array(next(feed))

    monkeypatch.setattr(ic.np.random, "randint", randint)
    reference = np.asarray(ic.glass_blur(Image.fromarray(image), severity)) / 255
    assert next(feed, None) is None  # every offset consumed: the same scan
    ours = corrupt(as_tensor(image[None]), "glass_blur", severity, generator=seed, pixel_scale=1.0)[0]
    diff = np.abs(ours.permute(1, 2, 0).double().numpy() - reference)
    # float32 vs float64 Gaussians can truncate a pixel to the neighbouring 8-bit level before the shuffle
    assert diff.mean() < 2e-4 and diff.max() < 2.5 / 255


def _fed_uniform(g: torch.Generator):
    """numpy's ``uniform(low, high, shape)`` drawn as privreid's ``Context.uniform`` draws it."""
    def uniform(low, high, size):
        u = torch.rand(size, generator=g)
        return (low + (high - low) * u).double().numpy()

    return uniform


@pytest.mark.parametrize("size,decay", [(64, 2.0), (128, 1.4)])
def test_plasma_fractal_is_the_packages_given_the_same_draws(ic, monkeypatch, size, decay):
    monkeypatch.setattr(ic.np.random, "uniform", _fed_uniform(torch.Generator().manual_seed(7)))
    reference = ic.plasma_fractal(mapsize=size, wibbledecay=decay)
    ours = plasma_fractal(1, size, decay, Context(torch.Generator().manual_seed(7), 1.0))[0]
    np.testing.assert_allclose(ours.numpy(), reference, rtol=0, atol=1e-9)


@pytest.mark.parametrize("severity", [2, 4, 5])
def test_fog_is_the_packages_given_the_same_draws(ic, monkeypatch, severity):
    image = person_crops(1, seed=severity)[0]
    monkeypatch.setattr(ic.np.random, "uniform", _fed_uniform(torch.Generator().manual_seed(severity)))
    reference = np.asarray(ic.fog(Image.fromarray(image), severity)) / 255
    ours = corrupt(as_tensor(image[None]), "fog", severity, generator=severity, pixel_scale=1.0)[0]
    np.testing.assert_allclose(ours.permute(1, 2, 0).double().numpy(), reference, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_frost_changes_images_as_much_as_the_packages_photographs(ic):
    """Mean |x' - x| over 500 images at severities 3-5, within 6 % of the package's.

    Measured ratios 0.99-1.04 over three image seeds; the spread is mostly which texture (photograph) each
    image draws.  Before the textures took the photographs' moments the ratio was 0.72-0.97.
    """
    images = person_crops(500, seed=11)
    x = as_tensor(images)
    np.random.seed(0)
    for severity in (3, 4, 5):
        reference = np.stack([np.asarray(ic.frost(Image.fromarray(im), severity)) for im in images]) / 255
        ours = corrupt(x, "frost", severity, generator=severity, pixel_scale=1.0).permute(0, 2, 3, 1).numpy()
        ratio = np.abs(ours - images / 255).mean() / np.abs(reference - images / 255).mean()
        assert 0.94 < ratio < 1.06, (severity, ratio)
