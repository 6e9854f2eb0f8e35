"""Model files from elsewhere, built in the tests with those projects' key names (torchreid, fast-reid, torchvision).

Each ``*_parts`` function returns the state dict a project would save and the
modules it was made of, so a test can compute the features the file must give.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision
from torch import nn

from privreid.data.transforms import IMAGENET_MEAN, IMAGENET_STD

H, W = 32, 16


def images(n: int = 4) -> torch.Tensor:
    return torch.rand(n, 3, H, W, generator=torch.Generator().manual_seed(0))


def normalised(batch: torch.Tensor) -> torch.Tensor:
    return (batch - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def randomise_bn(module: nn.Module) -> nn.Module:
    """Non-trivial running statistics, so a wrongly mapped BatchNorm changes the features."""
    gen = torch.Generator().manual_seed(1)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return module.eval()


def trunk() -> nn.Module:
    """A torchvision ResNet-18 without its fc layer, seeded, with random BatchNorm statistics."""
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None)
    net.fc = nn.Identity()
    return randomise_bn(net)


def torchreid_parts(classes: int = 5) -> tuple[dict, nn.Module, nn.Module]:
    """torchreid's ``model.pth.tar-N`` contents (ResNet-18 + ``fc`` block Linear-BN-ReLU + ``classifier``, saved
    from DataParallel), the feature module and the classifier."""
    body = trunk()
    fc = randomise_bn(nn.Sequential(nn.Linear(512, 32), nn.BatchNorm1d(32), nn.ReLU()))
    classifier = nn.Linear(32, classes)
    state = {**body.state_dict(), **{f"fc.{k}": v for k, v in fc.state_dict().items()},
             **{f"classifier.{k}": v for k, v in classifier.state_dict().items()}}
    checkpoint = {"state_dict": {f"module.{k}": v for k, v in state.items()}, "epoch": 60, "rank1": 0.9}
    return checkpoint, nn.Sequential(body, fc).eval(), classifier


def fastreid_parts(classes: int = 7) -> tuple[dict, nn.Module, torch.Tensor]:
    """fast-reid's ``model_final.pth`` contents (ResNet-18 backbone with last stride 1 and ceil-mode max pool,
    BNNeck head, ``heads.weight`` classifier), the feature module and the classifier weight."""
    body = trunk()
    body.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)  # fast-reid's ResNet
    body.layer4[0].conv1.stride = (1, 1)  # last stride 1
    body.layer4[0].downsample[0].stride = (1, 1)
    bnneck = randomise_bn(nn.BatchNorm2d(512))
    weight = torch.randn(classes, 512)
    state = {**{f"backbone.{k}": v for k, v in body.state_dict().items()},
             **{f"heads.bottleneck.0.{k}": v for k, v in bnneck.state_dict().items()}, "heads.weight": weight}

    class Features(nn.Module):
        def forward(self, x):
            return bnneck(body(x)[..., None, None])[..., 0, 0]

    return {"model": state, "iteration": 100}, Features().eval(), weight


def save_torchreid(path: Path) -> Path:
    torch.save(torchreid_parts()[0], path)
    return path


def save_fastreid(path: Path) -> Path:
    torch.save(fastreid_parts()[0], path)
    return path


def torchreid_engine_file(arch: str, save_dir: Path, classes: int = 5) -> Path:
    """The file torchreid's own engine writes for ``arch`` (``ImageSoftmaxEngine.save_model``, through
    ``torchreid.utils.save_checkpoint``), after one Adam step with a multi-step scheduler: ``rank1`` is a numpy
    float32, as ``Engine.run`` passes ``evaluate_rank``'s ``cmc[0]``.  The BatchNorm statistics are randomised so
    that a wrongly mapped layer shows in the features.  Returns ``save_dir/model/model.pth.tar-10``."""
    from types import SimpleNamespace

    import numpy as np
    from torchreid import reid

    torch.manual_seed(0)
    model = reid.models.build_model(arch, classes, loss="softmax", pretrained=False, use_gpu=False)
    optimizer = reid.optim.build_optimizer(model, optim="adam", lr=3e-4)
    scheduler = reid.optim.build_lr_scheduler(optimizer, lr_scheduler="multi_step", stepsize=[20, 40])
    manager = SimpleNamespace(train_loader=None, test_loader=None, num_train_pids=classes)
    engine = reid.engine.ImageSoftmaxEngine(manager, model, optimizer, scheduler=scheduler, use_gpu=False)
    model.train()
    loss = nn.functional.cross_entropy(model(torch.rand(4, 3, 64, 32)), torch.arange(4) % classes)
    loss.backward()
    optimizer.step()
    scheduler.step()
    randomise_bn(model)
    engine.save_model(9, np.float32(0.5), str(save_dir))
    return save_dir / "model" / "model.pth.tar-10"


def fastreid_checkpointer_file(path: Path, *, layout: str = "current") -> tuple[Path, nn.Module]:
    """A file in the layout fast-reid's ``Checkpointer.save`` writes (fastreid/utils/checkpoint.py): ``model`` (the
    state dict), then each checkpointable's ``state_dict()`` under its name, then the extra keyword data.  fast-reid
    (not on PyPI) is not imported: the dict is built with the same objects' state dicts.  ``layout="current"`` is
    fast-reid v1's trainer (checkpointables ``optimizer``, ``lr_sched`` and ``warmup_sched``, extra data ``epoch``
    and ``metric``); ``"early"`` the v0 trainer's (``optimizer``, ``scheduler``, ``iteration``).  Returns the path
    and the feature module."""
    checkpoint, features, weight = fastreid_parts()
    params = [torch.nn.Parameter(torch.zeros(3))]
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    params[0].grad = torch.ones(3)
    optimizer.step()
    lr_sched = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[40, 90], gamma=0.1)
    data = {"model": checkpoint["model"], "optimizer": optimizer.state_dict()}
    if layout == "current":
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: 1.0)  # fast-reid's WarmupLR is one
        data.update(lr_sched=lr_sched.state_dict(), warmup_sched={k: v for k, v in warmup.state_dict().items()
                                                                  if k != "lr_lambdas"}, epoch=59, metric=71.25)
    else:
        data.update(scheduler=lr_sched.state_dict(), iteration=12000)
    torch.save(data, path)
    return path, features
