"""Datasets: real-benchmark loaders, statistics, federated partitions, sampling and transforms."""

from privreid.lazy import lazy_exports

#: public name -> (module, attribute): imported on first use (privreid.lazy), so the CLI's --help needs no torch
_PUBLIC = {
    "DATASET_FORMATS": ("privreid.data.formats", "DATASET_FORMATS"),
    "DatasetFormat": ("privreid.data.formats", "DatasetFormat"),
    "available_formats": ("privreid.data.formats", "available_formats"),
    "detect_format": ("privreid.data.formats", "detect_format"),
    "load_dataset": ("privreid.data.formats", "load_dataset"),
    "register_format": ("privreid.data.formats", "register_format"),
    "verify_images": ("privreid.data.formats", "verify_images"),
    "PROTOCOLS": ("privreid.data.partition", "PROTOCOLS"),
    "make_federation": ("privreid.data.partition", "make_federation"),
    "PKSampler": ("privreid.data.sampler", "PKSampler"),
    "dataset_stats": ("privreid.data.stats", "dataset_stats"),
    "format_stats_table": ("privreid.data.stats", "format_stats_table"),
    "ImageDataset": ("privreid.data.torch_dataset", "ImageDataset"),
    "SequenceDataset": ("privreid.data.torch_dataset", "SequenceDataset"),
    "IMAGENET_MEAN": ("privreid.data.transforms", "IMAGENET_MEAN"),
    "IMAGENET_STD": ("privreid.data.transforms", "IMAGENET_STD"),
    "build_transforms": ("privreid.data.transforms", "build_transforms"),
    "ClientData": ("privreid.data.types", "ClientData"),
    "Federation": ("privreid.data.types", "Federation"),
    "INFRARED": ("privreid.data.types", "INFRARED"),
    "ReIDDataset": ("privreid.data.types", "ReIDDataset"),
    "Sample": ("privreid.data.types", "Sample"),
    "TestSet": ("privreid.data.types", "TestSet"),
    "VIProtocol": ("privreid.data.types", "VIProtocol"),
    "VISIBLE": ("privreid.data.types", "VISIBLE"),
    "relabel": ("privreid.data.types", "relabel"),
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
