"""The public (shared) data set of FedPav's optimisations (paper 004, Sec. 5).

Cosine distance weight (CDW, Sec. 5.3 / Alg. 2-3 line 19-20), knowledge distillation (KD, Sec. 5.2 / Alg. 3 line
7-11) and client clustering (CC, Sec. 5.1 / Alg. 2 line 8-9) all run models on images of an *additional, unlabelled*
person ReID data set that "is shareable among the server and clients" (footnote 2; the paper uses CUHK02, Sec. 5.5).
It is **not** client data but data the server may hold and hand out, so running models on it on the server does not
break privreid's privacy boundary (the server never sees a client's images).  Its labels, if any, are never read.

Where it comes from (``--opt public_data=...``):

* ``"synth"`` (default; also ``null`` or empty): a separate synthetic domain, rendered by
  :func:`privreid.data.synthetic.ensure_synthetic` (cached like the synthetic federation) with a seed derived from,
  and different from, the federation's ``synth_seed`` (so no client's identities), and ``domain_shift=0``: the
  neutral camera style, unlike every domain of the default synthetic federation (calibrated presets at shift 0.7), so
  it is a domain of its own, as CUHK02 is for the paper's clients.  It is rendered at the run's image size with just
  enough identities for ``public_size`` images.
* a directory: any ``--data`` root (a dataset in a supported layout, a directory of such datasets, or a ``privreid
  data synth`` output); the ``train`` splits of everything it holds are pooled.

Then ``public_size`` images (default 256; ``0`` = all) are drawn without replacement with a generator seeded from the
**run seed**, so every run with the same seed uses the same public images, and decoded once per process with the
evaluation transform (resize + normalise, no augmentation) into one ``(N, 3, H, W)`` CPU tensor that the clients' CDW
probe and the server's KD / CC steps share (cached; nobody may write to it).

Cost: the paper distils on all 7,264 CUHK02 images every round; privreid's default of 256 keeps the server's
per-round work (``K + 1`` forward passes and one backward pass over the set) small on a CPU.  Raise ``public_size``
to follow the paper more closely.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privreid.config import RunConfig
from privreid.errors import ConfigError, DataError
from privreid.seeding import derive_seed

@dataclass(frozen=True)
class PublicOptions:
    """``--opt`` keys shared by every method that uses the public set, and their defaults."""

    #: "synth": a separate synthetic domain; else a dataset directory
    public_data: str | None = "synth"
    #: images drawn from it (0 = all)
    public_size: int = 256
    #: size of B_shared (CDW probe) and of CC's feature batch (Sec. 5.1: 32)
    public_batch: int = 32


SYNTH_SOURCES = (None, "", "synth")


@dataclass(frozen=True)
class PublicSet:
    """The public images, normalised, ``(N, 3, H, W)`` on the CPU, plus where they came from."""

    images: torch.Tensor
    source: str

    def __len__(self) -> int:
        return len(self.images)

    def head(self, size: int) -> torch.Tensor:
        """The first ``size`` images (a fixed batch)."""
        return self.images[:size]

    def batch(self, size: int, seed: int) -> torch.Tensor:
        """``size`` images drawn without replacement by a generator seeded with ``seed``.

        Uses its own generator, so it consumes no global random state.
        """
        gen = torch.Generator().manual_seed(int(seed))
        idx = torch.randperm(len(self.images), generator=gen)[:size]
        return self.images[idx]


def public_option(config: RunConfig, key: str) -> Any:
    """The value of a :class:`PublicOptions` key for this run (``--opt``, typed, or the default)."""
    from privreid.federated.method_options import run_options

    return getattr(run_options(PublicOptions, config), key)


def _positive_int(config: RunConfig, key: str, *, allow_zero: bool = False) -> int:
    """Option ``key`` (an int, typed by :class:`PublicOptions`) checked to be ``> 0`` (``>= 0`` if ``allow_zero``)."""
    value = public_option(config, key)
    if not (value > 0 or (allow_zero and value == 0)):
        raise ConfigError(f"option {key} must be an integer {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


def public_size(config: RunConfig) -> int:
    return _positive_int(config, "public_size", allow_zero=True)


def public_batch_size(config: RunConfig) -> int:
    return _positive_int(config, "public_batch")


def public_synth_seed(synth_seed: int) -> int:
    """The seed of the synthetic public domain: derived from, and never equal to, ``synth_seed``."""
    seed = derive_seed("privreid-public-synth", synth_seed) & 0x7FFFFFFF
    return seed if seed != (synth_seed & 0xFFFFFFFF) else seed ^ 1


def load_public_set(config: RunConfig) -> PublicSet:
    """The public set of this run (see the module docstring); cached per process."""
    source = public_option(config, "public_data")
    if source not in SYNTH_SOURCES and not isinstance(source, str):
        raise ConfigError(f"option public_data must be a directory or 'synth', got {source!r}")
    source = None if source in SYNTH_SOURCES else source
    d = config.data
    return _load(source, public_size(config), derive_seed(config.runtime.seed, "public-subset"),
                 d.height, d.width, d.synth_seed)


@functools.lru_cache(maxsize=4)
def _load(source: str | None, size: int, subset_seed: int, height: int, width: int, synth_seed: int) -> PublicSet:
    from privreid.data import ImageDataset, build_transforms
    from privreid.data.catalog import resolve_datasets

    if source is None:
        root = synthetic_public_root(size, height, width, synth_seed)
        label = f"synthetic public domain ({root.name})"
    else:
        root, label = source, str(source)
    datasets = resolve_datasets([str(root)])
    samples = sorted({s for ds in datasets.values() for s in ds.train})  # labels are never used
    if not samples:
        raise DataError(f"the public data set {label} has no training images")
    if size and size < len(samples):
        rng = np.random.default_rng(subset_seed)
        samples = [samples[i] for i in sorted(rng.choice(len(samples), size=size, replace=False).tolist())]
    dataset = ImageDataset(samples, build_transforms(height, width, train=False))
    images = torch.stack([dataset[i][0] for i in range(len(dataset))])
    images.requires_grad_(False)
    return PublicSet(images=images, source=f"{label}: {len(samples)} images")


def synthetic_public_root(size: int, height: int, width: int, synth_seed: int):
    """Render (once, cached) the synthetic public domain with enough identities for ``size`` images."""
    from privreid.data.synthetic import SynthConfig, ensure_synthetic

    cams, per_cam = 3, 2
    # every identity is seen by >= 2 cameras x 2 images, so this many ids give >= size images
    ids = max(4, math.ceil((size or 256) / (2 * per_cam)))
    cfg = SynthConfig(num_domains=1, ids_per_domain=ids, test_ids_per_domain=1, cams_per_domain=cams,
                      min_cams_per_id=2, images_per_id_per_cam=per_cam, max_query_cams=1,
                      height=height, width=width, distractors=0, junk=0, seed=public_synth_seed(synth_seed),
                      domain_shift=0.0)
    return ensure_synthetic(config=cfg)
