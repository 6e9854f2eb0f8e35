"""``privreid invert``: reconstruct a client's training image from what the server would receive.

The campaign itself (subjects, owners, defenses, outputs) is
:func:`privreid.inversion.campaign.invert_checkpoints`, and for model
files from elsewhere :func:`~privreid.inversion.campaign.invert_files`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from privreid.inversion.settings import (MATCHES, OPTIMISERS, SCHEDULES, SELECTS, SPACES, STARTS, TV_FORMS, UPDATES,
                                          InversionSettings)
from privreid.commands.common import (ArchOption, DeviceOption, HeightOption, MeanOption, StdOption, WidthOption, checkpoint_paths,
                     run_dir_or_exit, run_or_exit)
from privreid.commands.options import settings_options

#: ``--method``'s help (the built-in inversion attacks: their registry, privreid.inversion.optimise, imports
#: torch, which ``--help`` does not wait for; tests/test_option_names.py checks every registered one is named)
INVERSION_ATTACK_HELP = ("Inversion attack: dlg (DLG: l2 distance, TV 0), idlg (iDLG: l2, TV 0) or ig (Inverting "
                         "Gradients: cosine, TV 0.2); an attack a plugin registers is named the same way.")
#: ``--threat``'s help, the built-in threat models (their registry imports torch, as above)
THREAT_HELP = ("Threat model: full (whole gradient, head included), shared (shared keys only), shared-feature (the "
               "bottleneck's exact feature leak, then feature inversion) or aggregate (the sum of --clients m "
               "clients' shared updates: what a server under secure aggregation sees).")


@settings_options(
    InversionSettings, "subjects", flags={"attack": "--method", "signed": "--signed/--no-signed"},
    choices={"match": MATCHES, "tv_form": TV_FORMS, "space": SPACES, "start": STARTS, "optimizer": OPTIMISERS,
             "schedule": SCHEDULES, "select": SELECTS, "update": UPDATES},
    attack=INVERSION_ATTACK_HELP,
    match="Distance matched (default: the attack's, see --method).",
    tv="Total-variation weight, on the image in --space (default: the attack's, see --method).",
    tv_form="Total variation: anisotropic (mean |dx| + mean |dy|, kornia's) or isotropic (mean sqrt(dx^2 + dy^2), "
            "Geiping et al.'s Eq. 4).",
    bn="Weight of the BatchNorm-statistics image prior (Yin et al. 2021; 0 = off; models with BatchNorm2d).",
    space="Where the image is optimised, boxed and regularised: the model's normalised input or [0, 1] pixels.",
    start="Random start: N(0, 1) in normalised input space (normal, Geiping et al.'s) or U[0, 1] pixels (uniform, "
          "L2RW+'s); it is also the random-image baseline.",
    optimizer="Optimiser of the image: adam or sgd.",
    signed="Step on the sign of the objective's gradient (Geiping et al.'s signed gradients).",
    schedule="Learning rate: step (x0.1 at 3/8, 5/8 and 7/8 of the iterations, Geiping et al.'s) or none "
             "(constant).",
    select="Image returned: the iterate with the lowest objective (best) or the last.",
    restarts="Random starts per batch; the one with the lowest final objective is kept.",
    iterations="Iterations per start (the --schedule milestones scale with them; every report names the "
               "budget).",
    lr="Learning rate of the image (in --space units).",
    batch="Images in the client's step: one gradient of --batch images is inverted, labels recovered by count "
          "(--subjects must be a multiple; --threat full).",
    local_steps="SGD steps the client takes on its batch before uploading (their averaged update is observed; "
                "--threat full).",
    local_lr="The client's learning rate in those local steps.",
    update="How a multi-step update is attacked: simulate the local steps, or match it as one gradient.")
def invert_command(
    model: Optional[Path] = typer.Option(None, "--model", help="Checkpoint (ckpt.pt) whose client is attacked, or "
                                         "a model file from elsewhere with a classifier (docs/models.md; "
                                         "--threat full)."),
    models: Optional[list[Path]] = typer.Option(
        None, "--models", help="Several checkpoints attacked on the same subjects: --models a.pt b.pt "
                               "(or repeat --models)."),
    more_models: Optional[list[Path]] = typer.Argument(
        None, metavar="[CKPT]...", help="More checkpoints (what follows --models a.pt lands here)."),
    client: Optional[str] = typer.Option(None, help="Client whose training images are the subjects "
                                                   "(default: the first checkpoint's first client)."),
    index: Optional[int] = typer.Option(None, help="Index of the first subject in the client's training list "
                                                  "(default 0)."),
    image: Optional[Path] = typer.Option(None, help="Attack this image file instead; it must have the model's "
                                                   "input size."),
    label: Optional[int] = typer.Option(None, help="With --image: its label in the client's classifier (default 0)."),
    subjects: int = typer.Option(1, "--subjects", help="Number of subjects: --index, then evenly spaced through "
                                 "the client's training list."),
    threat: str = typer.Option("full", metavar="THREAT", help=THREAT_HELP),
    clients: Optional[list[str]] = typer.Option(None, "--clients", help="--threat aggregate: how many clients' "
                                                "updates are summed, e.g. --clients 1,2,4,8 (one row each, "
                                                "next to the single-upload reference; default: the "
                                                "checkpoint's own clients per round, what its server summed)."),
    defended: bool = typer.Option(True, "--defended/--no-defended",
                                  help="Apply the defenses the run was trained with (beta noise, DP)."),
    seed: int = typer.Option(0, help="Seed of the random starts and the defense noise."),
    device: DeviceOption = "auto",
    precision: str = typer.Option("fp32", "--precision", help="Accepted for symmetry with the other commands; "
                                  "inversion runs in fp32 whatever it says (privreid.precision.INVERSION_NOTE)."),
    data: Optional[list[str]] = typer.Option(None, "--data", help="A model file from elsewhere: the subjects are "
                                             "--subjects training images of this data's first domain (their labels: "
                                             "the model's own predictions)."),
    arch: ArchOption = None,
    height: HeightOption = None,
    width: WidthOption = None,
    mean: MeanOption = None,
    std: StdOption = None,
    out: Path = typer.Option(Path("runs/invert"), help="Output directory: metrics.json, grid.png, summary.md "
                                                       "(one sub-directory per checkpoint with several)."),
    **attack_settings,
) -> None:
    """Reconstruct a client's training image from its upload (DLG / iDLG / Inverting Gradients).

    Threat models: the full gradient of a one-image (L2RW+ Fig. 8) or --batch
    step, over --local-steps local steps; the shared part only (the head
    stays on the client); or the shared bottleneck's exact feature leak
    followed by feature inversion.  The default attack is Inverting Gradients
    with the strong recipe (signed Adam, step decay, TV on the normalised
    image, best iterate; docs/leakage-and-robustness.md); L2RW+'s Fig. 8
    setting is --method idlg --lr 0.01 --no-signed --schedule none --space
    pixels --start uniform --select last.  Reports MSE / PSNR / SSIM, the
    model's feature cosine and label correctness, each next to a random-image
    baseline: a lower bound on what leaks.

    Example: privreid invert --models runs/central/ckpt.pt runs/fedpav/ckpt.pt --subjects 4 --method ig --out runs/invert
    """
    from privreid.api import invert_run
    from privreid.inversion.aggregate import check_campaign
    from privreid.inversion.campaign import batches
    from privreid.precision import INVERSION_NOTE, check_precision

    def validate():
        check_precision(precision)
        settings = InversionSettings(**attack_settings)
        batches(subjects, settings.batch)  # refused before any model loads
        check_campaign(threat, image=image, clients=clients)
        return settings, checkpoint_paths(model, models, more_models)

    settings, paths = run_or_exit(validate)

    with run_dir_or_exit(out, "invert"):
        if precision != "fp32":  # inside the run directory, so log.txt keeps the line next to config.yaml's flag
            typer.echo(f"note: --precision {precision} ignored: {INVERSION_NOTE}", err=True)
        result = run_or_exit(invert_run, paths, out, settings, threat, client=client, index=index,
                             image=image, label=label, data=data, n=subjects, clients=clients, defended=defended,
                             seed=seed, device=device, announce=typer.echo, arch=arch, height=height, width=width,
                             mean=mean, std=std)
        typer.echo(result.table)
        typer.echo(f"wrote {out}")
