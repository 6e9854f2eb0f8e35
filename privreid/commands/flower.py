"""``privreid flower superlink | supernode | run``: multi-site training on a Flower deployment (flwr 1.41;
docs/flower.md): ``superlink`` and ``supernode`` start Flower's servers in the foreground with privreid's
settings; ``run`` submits one training run to a SuperLink and waits for it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from privreid.errors import ConfigError
from privreid.commands.common import run_or_exit
from privreid.commands.options import config_options, run_config

flower_app = typer.Typer(help="Train across machines on Flower: a SuperLink, one SuperNode per site, then `run`.",
                         no_args_is_help=True)

TLS_HELP = "Without TLS; only for tests on one machine (127.0.0.1)."


def _exec(cmd: list[str]) -> None:
    """Replace this process by ``cmd`` (Flower's server keeps the terminal, Ctrl-C stops it)."""
    from privreid.flower.deployment import flower_env

    typer.echo(" ".join(cmd), err=True)
    os.execve(cmd[0], cmd, flower_env())


def require_loopback(address: str, option: str) -> None:
    """Refuse an ``--insecure`` address (``HOST`` or ``HOST:PORT``) off loopback (``localhost``, 127.0.0.0/8, ::1;
    no name is resolved)."""
    import ipaddress

    host = address.strip()
    if host.startswith("["):  # [::1]:8000
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(f"--insecure (no TLS) is only for tests on one machine; {option} {address} is not a "
                          "loopback address (127.0.0.1, ::1, localhost): use TLS certificates")


def check_client_tls(insecure: bool, root_certificates: Optional[Path], superlink: str) -> None:
    """A SuperLink client (``supernode``, ``run``) verifies it with ``--root-certificates`` or is ``--insecure``
    on loopback."""
    if insecure == (root_certificates is not None):
        raise ConfigError("give --root-certificates CA.pem (TLS) or --insecure (a test on one machine), "
                          "not both, not neither")
    if insecure:
        require_loopback(superlink, "--superlink")


@flower_app.command("superlink")
def superlink_command(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port of the SuperLink's HTTP APIs (Fleet, Control, Runtime)."),
    insecure: bool = typer.Option(False, "--insecure", help=TLS_HELP),
    ssl_certfile: Optional[Path] = typer.Option(None, help="TLS certificate of this server (PEM)."),
    ssl_keyfile: Optional[Path] = typer.Option(None, help="Its private key (PEM)."),
    ssl_ca_certfile: Optional[Path] = typer.Option(None, help="The CA certificate that signed it (PEM)."),
    database: Optional[Path] = typer.Option(None, help="SQLite file for the SuperLink's state (default: memory)."),
) -> None:
    """Start the coordinator (flower-superlink, no runtime dependency installation).

    Example: privreid flower superlink --host 0.0.0.0 --ssl-certfile server.pem --ssl-keyfile server.key --ssl-ca-certfile ca.pem
    """
    from privreid.flower.deployment import TLS, superlink_command as command

    def build() -> list[str]:
        tls = TLS(ssl_certfile, ssl_keyfile, ssl_ca_certfile)
        if tls.insecure and not insecure:
            raise ConfigError("give --ssl-certfile, --ssl-keyfile and --ssl-ca-certfile, or --insecure for a "
                              "test on one machine")
        if insecure and not tls.insecure:
            raise ConfigError("--insecure excludes the --ssl-* files")
        if insecure:
            require_loopback(host, "--host")
        if database is not None:  # a directory or a missing folder: one line, never sqlalchemy's traceback
            from privreid.rundir import check_output_file

            check_output_file(database, "--database")
        return command(host=host, port=port, tls=tls, database=database)

    _exec(run_or_exit(build))


@flower_app.command("supernode")
def supernode_command(
    data: str = typer.Option(..., "--data", help="This site's dataset root (one dataset, any supported layout; DIR:FORMAT names its layout)."),
    superlink: str = typer.Option("127.0.0.1:8000", help="The SuperLink's HOST:PORT."),
    name: Optional[str] = typer.Option(None, help="Client name (default: the dataset's name)."),
    fmt: str = typer.Option("auto", "--format", help="Dataset layout (auto-detected by default)."),
    state_dir: Optional[Path] = typer.Option(None, help="Where the site keeps its local state between runs "
                                             "(default: $PRIVREID_CACHE/flower-sites/NAME)."),
    port: int = typer.Option(9094, help="Port of this SuperNode's own runtime API (distinct per SuperNode "
                             "on one machine)."),
    root_certificates: Optional[Path] = typer.Option(None, help="CA certificate to verify the SuperLink (TLS)."),
    insecure: bool = typer.Option(False, "--insecure", help=TLS_HELP),
) -> None:
    """Start one site (flower-supernode) that trains on its own dataset only.

    Example: privreid flower supernode --data /data/Market-1501 --superlink coordinator:8000 --root-certificates ca.pem
    """
    from privreid.data.catalog import resolve_datasets, verify_datasets
    from privreid.flower.deployment import check_port, supernode_command as command
    from privreid.flower.site import NODE_DATA, NODE_FORMAT, NODE_NAME, NODE_STATE_DIR, Site

    def build() -> list[str]:
        check_port(port)  # before the dataset is read
        check_client_tls(insecure, root_certificates, superlink)
        verify_datasets(resolve_datasets([str(Path(data).expanduser())], fmt))
        site = Site.load(str(Path(data).expanduser().resolve()), fmt=fmt, name=name, state_dir=state_dir)
        typer.echo(f"site {site.client.name}: {site.client.num_samples} images of {site.client.num_classes} "
                   f"identities; local state in {site.state_dir}", err=True)
        return command(superlink, {NODE_DATA: str(Path(data).expanduser().resolve()), NODE_FORMAT: fmt,
                                   NODE_NAME: name, NODE_STATE_DIR: str(site.state_dir.resolve())},
                       port=port, root_certificates=root_certificates)

    _exec(run_or_exit(build))


#: the run-configuration options of ``privreid flower run`` (any other field: ``--set``)
FLOWER_RUN_OPTIONS = ("method", "data", "fmt", "test_domains", "rounds", "local_epochs", "batch_size", "optimizer",
                      "lr_backbone", "lr_head", "client_fraction", "max_steps", "eval_every", "opt", "beta",
                      "beta_mode", "secure_aggregation", "secagg_shares", "secagg_threshold", "secagg_clip",
                      "secagg_quantization", "secagg_max_weight", "arch", "feat_dim", "height", "width", "seed",
                      "device", "precision")


@flower_app.command("run")
@config_options(
    FLOWER_RUN_OPTIONS,
    data="The study's datasets as `privreid train --data` takes them (default: synth). Recorded in the checkpoint; "
         "the coordinator evaluates the held-out ones if it has them.",
    secure_aggregation="Flower's SecAgg+ (secaggplus_mod on the sites, SecAggPlusWorkflow on the server): the "
                       "server learns only the sum of each round's updates; a site that drops out after sharing "
                       "its keys is recovered by the protocol.",
    seed="Random seed (same seed, same result as `privreid train`).",
    device="Where models run, on every site and the coordinator: CUDA when available (auto), the CPU or a "
           "CUDA device.",
    precision="fp32, bf16 or fp16: autocast of every site's training and of the evaluations (fp16 with a gradient "
              "scaler; DP-SGD takes fp32 or bf16), as `privreid train --precision`. Default fp32.")
def run_command(
    ctx: typer.Context,
    config_file: Optional[Path] = typer.Option(None, "--config", help="YAML preset of these options (keys are "
                                               "option names); flags override it."),
    superlink: str = typer.Option("127.0.0.1:8000", help="The SuperLink's HOST:PORT."),
    root_certificates: Optional[Path] = typer.Option(None, help="CA certificate to verify the SuperLink (TLS)."),
    insecure: bool = typer.Option(False, "--insecure", help=TLS_HELP),
    sites: int = typer.Option(2, help="Wait for this many SuperNodes before round 1."),
    min_clients: int = typer.Option(0, help="Aggregate a round once this many selected sites uploaded; a site "
                                    "that fails is dropped. 0: every selected site must upload, else stop."),
    round_timeout: float = typer.Option(0.0, help="Seconds to wait for a round's uploads (0: until Flower "
                                        "reports the site unreachable)."),
    wait_timeout: float = typer.Option(300.0, help="Seconds to wait for the sites to connect."),
    server_eval: bool = typer.Option(True, help="Evaluate the held-out domains on the coordinator."),
    out: Path = typer.Option(Path("runs/flower"), help="Output directory on the SuperLink's machine "
                             "(ckpt.pt, metrics.jsonl, summary.json)."),
    overwrite: bool = typer.Option(False, help="Replace a run already in --out."),
    resume: bool = typer.Option(False, help="Continue the run in --out from its last checkpoint."),
    timeout: Optional[float] = typer.Option(None, help="Stop the run after this many seconds."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    **options,
) -> None:
    """Train on the sites connected to a SuperLink; writes the same files as `privreid train`.

    Example: privreid flower run --method fedpav --rounds 10 --sites 3 --superlink coordinator:8000 --root-certificates ca.pem --out runs/fedpav-flower
    """
    from privreid.commands.common import params_with_preset
    from privreid.log import progress_bar
    from privreid.federated.resume import resume_checkpoint, restart_line
    from privreid.flower.deployment import rounds_done, run_on_superlink
    from privreid.provenance import open_run, train_preset
    from privreid.rundir import prepare_out_dir
    from privreid.flower.server_app import ServerSettings, check_flower_support

    def go() -> dict:
        p = params_with_preset(ctx, config_file)
        if p["overwrite"] and p["resume"]:
            raise ConfigError("--overwrite and --resume exclude each other")
        check_client_tls(p["insecure"], p["root_certificates"], p["superlink"])
        p["data"] = [d if d == "synth" or not Path(d).expanduser().exists() else str(Path(d).expanduser().resolve())
                     for d in p["data"] or []]
        config = run_config(p, FLOWER_RUN_OPTIONS).validate()
        check_flower_support(config)
        out_dir = Path(p["out"]).expanduser().resolve()
        # stopped before its first checkpoint: --resume starts it from round 0 (checked before anything is written)
        restart = p["resume"] and resume_checkpoint(out_dir, config) is None
        resume = p["resume"] and not restart
        settings = ServerSettings(config, out_dir, sites=p["sites"], min_clients=p["min_clients"],
                                  round_timeout=p["round_timeout"], wait_timeout=p["wait_timeout"],
                                  server_eval=p["server_eval"], resume=resume).validate()
        if config.privacy.secure_aggregation:  # the round's size against the shares, before anything starts
            from privreid.defenses.secure_aggregation.mechanism import check_secure_aggregation
            from privreid.federated.engine import selection_size
            from privreid.composition import method_of

            fraction = config.federation.client_fraction or method_of(config).client_fraction
            check_secure_aggregation(config, selection_size(fraction, settings.sites))
        with open_run(out_dir, "flower run", config=train_preset(p), device=config.runtime.device,
                      seed=config.runtime.seed, resumed=p["resume"],
                      prepare=lambda d: prepare_out_dir(d, overwrite=p["overwrite"] or restart, resume=resume)):
            if restart:
                typer.echo(restart_line(out_dir))
            typer.echo(f"{config.federation.method} on Flower: waiting for {settings.sites} site(s) at "
                       f"{p['superlink']}; writing {out_dir}")
            bar = progress_bar(total=config.federation.rounds, desc=config.federation.method, enabled=not p["quiet"])

            def progress() -> None:
                bar.update(rounds_done(out_dir) - bar.n)

            try:
                run_on_superlink(settings, p["superlink"], root_certificates=p["root_certificates"],
                                 timeout=p["timeout"], on_poll=progress)
                progress()
            finally:
                bar.close()
            return json.loads((out_dir / "summary.json").read_text())

    summary = run_or_exit(go)
    typer.echo(json.dumps({k: v for k, v in summary.items() if not k.endswith("per_testset")}, indent=2))
