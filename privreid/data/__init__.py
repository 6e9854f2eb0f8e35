"""Datasets: real-benchmark loaders, statistics, federated partitions, sampling and transforms."""

from privreid.data.formats import (
    DATASET_FORMATS,
    DatasetFormat,
    available_formats,
    detect_format,
    load_dataset,
    register_format,
    verify_images,
)
from privreid.data.partition import PROTOCOLS, make_federation
from privreid.data.sampler import PKSampler
from privreid.data.stats import dataset_stats, format_stats_table
from privreid.data.torch_dataset import ImageDataset, SequenceDataset
from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD, build_transforms
from privreid.data.types import (
    INFRARED,
    VISIBLE,
    ClientData,
    Federation,
    ReIDDataset,
    Sample,
    TestSet,
    VIProtocol,
    relabel,
)

__all__ = [
    "DATASET_FORMATS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "INFRARED",
    "PROTOCOLS",
    "ClientData",
    "DatasetFormat",
    "Federation",
    "ImageDataset",
    "PKSampler",
    "ReIDDataset",
    "Sample",
    "SequenceDataset",
    "TestSet",
    "VISIBLE",
    "VIProtocol",
    "available_formats",
    "build_transforms",
    "dataset_stats",
    "detect_format",
    "format_stats_table",
    "load_dataset",
    "make_federation",
    "register_format",
    "relabel",
    "verify_images",
]
