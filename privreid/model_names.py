"""Names the command line offers for models from elsewhere, spelt out so that ``--help`` imports no torch.

:data:`TORCHREID_ARCHS` are torchreid 0.2.5's ``build_model`` names (``torchreid.reid.models``; its typo
``nasnsetmobile`` included; tests/test_cli_choices.py keeps them equal to the installed torchreid's);
:data:`INTERPOLATIONS` the test resizes :func:`privreid.data.build_transforms` takes.
"""

from __future__ import annotations

TORCHREID_ARCHS = (
    "densenet121", "densenet121_fc512", "densenet161", "densenet169", "densenet201", "hacnn", "inceptionresnetv2",
    "inceptionv4", "mlfn", "mobilenetv2_x1_0", "mobilenetv2_x1_4", "mudeep", "nasnsetmobile", "osnet_ain_x0_25",
    "osnet_ain_x0_5", "osnet_ain_x0_75", "osnet_ain_x1_0", "osnet_ibn_x1_0", "osnet_x0_25", "osnet_x0_5",
    "osnet_x0_75", "osnet_x1_0", "pcb_p4", "pcb_p6", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnet50_fc512", "resnet50_ibn_a", "resnet50_ibn_b", "resnet50mid", "resnext101_32x8d", "resnext50_32x4d",
    "se_resnet101", "se_resnet50", "se_resnet50_fc512", "se_resnext101_32x4d", "se_resnext50_32x4d", "shufflenet",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0",
    "squeezenet1_0_fc512", "squeezenet1_1", "xception",
)

#: the test resizes: torchvision's default, which torchreid uses, and PIL's bicubic, which fast-reid's test
#: transform uses (``T.Resize(..., interpolation=3)``)
INTERPOLATIONS = ("bilinear", "bicubic")
