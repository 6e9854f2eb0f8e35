"""The reproducible tables and figures of the five papers: what each shows, its cells and its budgets.

A :class:`TableSpec` with ``rows`` is runnable: each :class:`Row` is either a
training run of privreid (``train`` holds its `privreid train` options at
each scale) or a comparator privreid does not implement (``train`` is
``None``: the row is shown as "not implemented" with its published numbers).
``columns`` map a column of the paper to the test set that fills it at each
scale.  Rows may share one run (``Row.run``: FedPav Table 3's global and
local models), read another model of it (``Row.scope``) or measure something
else on the column's run (``Row.measure``: L2RW+ Table IX's attacks and
corruptions, Fig. 8's gradient inversions).  ``TableSpec.deviations`` are written under the table.  A spec
without rows is listed by ``privreid reproduce --list`` but its runner is not
written yet (``status`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

SCALES = ("smoke", "paper")
#: smoke-scale training budget shared by every run (tiny images and steps: exercises the code path only)
SMOKE_TRAIN = ["--rounds", "1", "--height", "32", "--width", "16", "--feat-dim", "32", "--batch-size", "8",
               "--max-steps", "2", "--eval-every", "1", "--device", "cpu"]
#: what every smoke-scale run of SMOKE_TRAIN costs (said in each table's smoke budget)
SMOKE_BUDGET = "1 round, 32x16"

#: the four source domains of FedReID and SKA at paper scale: --data-root folder -> format
RGB_SOURCES = {"dukemtmcreid": "dukemtmcreid", "market1501": "market1501", "cuhk03np": "cuhk03np-detected",
               "msmt17": "msmt17-train"}  # FedReID Table I / SKA: MSMT17's 30,248 train images, without val
RGB_SOURCES_TEXT = "Duke+Market+CUHK03+MSMT17"


def data_args(folders: dict[str, str]) -> list[str]:
    """``--data {data_root}/<folder>:<format>`` for each paper-scale folder (each root in its own layout)."""
    return [a for folder, fmt in folders.items() for a in ("--data", f"{{data_root}}/{folder}:{fmt}")]


@dataclass(frozen=True)
class Column:
    """A column of the paper: ``name`` as printed, and what fills it at each scale.

    ``source`` is one of

    * ``("dg", format)``: the DG-ReID protocol on a small benchmark (or, with
      a ``*-crosscam`` format, FedPav's cross-camera protocol), evaluating
      the run's global model from its checkpoint;
    * ``("seen", metric)``: the run's own seen-domain test sets, the global
      model's mean, from its ``summary.json``;
    * ``("local", metric)``: the personalised model of the client(s) on the
      seen test set that ``smoke`` / ``paper`` name, from ``summary.json``;
    * ``("global", metric)``: the global model on the (seen or held-out
      unseen) test set that ``smoke`` / ``paper`` name, as the run reports it
      (its ``best`` block: the last evaluation, or FedPav's mean of the best
      ``--report-best`` ones);
    * ``("mean", metric)``: the mean of the columns named in ``of`` (FedARKS'
      SAvg).

    A row's ``scope`` replaces ``local`` / ``global`` for that row.
    ``smoke`` / ``paper`` name the dataset (a ``--data-root`` folder at paper
    scale, a synthetic stand-in or domain at smoke scale); ``None``: no such
    data at that scale, the cell stays empty.
    """

    name: str
    source: tuple[str, str]
    smoke: str | None
    paper: str | None
    #: the run group that fills the column (L2RW+ Table VII: one run per dataset and row)
    group: str = ""
    #: the DG protocol's metric a "dg" column shows (one evaluation per run and dataset fills them all)
    metric: str = "rank1"
    #: a "mean" column: the columns it averages
    of: tuple[str, ...] = ()
    #: decimals table.md prints (L2RW+ Fig. 8's cosines and SSIMs need more than the percentages' one)
    decimals: int = 1


@dataclass(frozen=True)
class Row:
    name: str
    #: run group -> scale -> `privreid train` options (None: no run at that scale);
    #: None: a comparator privreid does not implement
    train: dict[str, dict[str, list[str] | None]] | None = None
    #: "local" / "global": which model of the run fills this row's local / global columns (FedPav Table 3)
    scope: Optional[str] = None
    #: the run directory's name when rows share a run (default: the row's name)
    run: Optional[str] = None
    #: L2RW+ Table IX: what this row measures on the column's run and test set instead of the column's source:
    #: ("attack" | "attack-clean" | "attack-drop", attack name) or ("corruption" | "corruption-clean" |
    #: "corruption-drop", ""); the metric is the column's (a drop is 100 * (clean - attacked) / clean);
    #: L2RW+ Fig. 8: ("inversion" | "inversion-random", modality), the column's metric of the reconstruction of
    #: that modality's subject (or of its random start), see :mod:`privreid.experiments.reproduce.leakage`
    measure: Optional[tuple[str, str]] = None

    def run_name(self, group: str) -> str:
        name = self.run or self.name
        return name if not group else f"{group}-{name}"

    def trains(self, column: Column, scale: str) -> bool:
        """Whether the cell of ``column`` trains this row's run at ``scale`` (it has options and data there)."""
        options = (self.train or {}).get(column.group, {}).get(scale)
        return options is not None and getattr(column, scale) is not None


@dataclass(frozen=True)
class TableSpec:
    key: str
    paper: str
    title: str
    shows: str
    #: scale -> the cost of one run and of the table, without the number of runs (:meth:`budget` counts them)
    cost: dict[str, str]
    columns: tuple[Column, ...] = ()
    rows: tuple[Row, ...] = ()
    #: paper-scale training data: --data-root folder -> format (checked before any work)
    paper_train: dict[str, str] = field(default_factory=dict)
    status: str = "runs"
    #: the paper's figure, drawn from the written rows into OUT/figure.png (None: the paper has none)
    figure: Optional[Callable] = None
    #: a run every cell is shown relative to (FedPav Table 4: the increase over standalone training)
    reference: Optional[Row] = None
    #: the paper prints methods as columns and datasets as rows (FedPav Table 5): table.md does too
    transpose: bool = False
    #: where privreid's cells differ from the paper's protocol (written under the table)
    deviations: tuple[str, ...] = ()

    def run_groups(self, scale: str) -> dict[str, tuple[Row, str]]:
        """Run directory -> (row, group) of every run :func:`privreid.experiments.reproduce.run_table` trains at ``scale``
        (the reference's included), sorted by name."""
        rows = self.rows + ((self.reference,) if self.reference is not None else ())
        found: dict[str, tuple[Row, str]] = {}
        for row in rows:
            for column in self.columns:
                if row.trains(column, scale):  # rows sharing a run: the first, as run_table trains it
                    found.setdefault(row.run_name(column.group), (row, column.group))
        return dict(sorted(found.items()))

    def runs(self, scale: str) -> list[str]:
        """The run directories :func:`privreid.experiments.reproduce.run_table` trains at ``scale`` (the reference's included)."""
        return list(self.run_groups(scale))

    def budget(self, scale: str) -> str:
        """``cost[scale]`` after the number of runs."""
        n = len(self.runs(scale))
        parts = [f"{n} run" + ("s" if n != 1 else ""), *([SMOKE_BUDGET] if scale == "smoke" else []), self.cost[scale]]
        return ", ".join(parts)


def _fedreid_table2() -> TableSpec:
    tests = (("iLIDS", "ilids", "synth-ilids"), ("VIPeR", "viper", "synth-viper"), ("3DPeS", "3dpes", "synth-3dpes"),
             ("CAVIAR", "caviar", "synth-caviar"), ("PRID", "prid", "synth-prid"), ("GRID", "grid", "synth-grid"))
    sources = RGB_SOURCES
    paper_data = data_args(sources)
    fedreid = Row("FedReID", train={"": {
        "smoke": ["--method", "fedreid", "--data", "synth", *SMOKE_TRAIN],
        "paper": ["--config", "configs/fedreid-paper.yaml", *paper_data, "--device", "{device}"],
    }})
    comparators = ("TJAIDL", "DSTML", "UMDL", "PAUL", "SyRI", "SSDAL", "JSTL (LOO)", "MLDG", "CrossGrad", "DIMN")
    return TableSpec(
        key="fedreid-table2", paper="002 FedReID", title="Table II: R1 on six unseen small benchmarks",
        shows="FedReID against centralised / fine-tuned generalisation methods, DG-ReID protocol (10 splits)",
        cost={"smoke": "synthetic stand-ins; under a minute on a CPU",
              "paper": f"100 rounds ResNet-50 on {RGB_SOURCES_TEXT}; GPU, about a day"},
        columns=tuple(Column(name, ("dg", fmt), smoke, fmt) for name, fmt, smoke in tests),
        rows=tuple(Row(name) for name in comparators) + (fedreid,),
        paper_train=sources,
        deviations=("CAVIAR's test draw (36 of its 50 two-camera people, one image per camera) follows Table I; "
                    "the authors' code has no CAVIAR split",),
    )


def _l2rw_table7() -> TableSpec:
    variants = (("B", ["--opt", "mrb=false", "--opt", "ca=none"]),
                ("B+CA", ["--opt", "mrb=false", "--opt", "ca=channel"]),
                ("B+gray", ["--opt", "mrb=false", "--opt", "ca=gray"]),
                ("B+CA+MRB (I-DPPT)", ["--opt", "mrb=true", "--opt", "ca=channel"]))
    smoke = ["--method", "dppt", "--data", "synth-vi", "--protocol", "ci", "--train-domains", "viA",
             "--test-domains", "viC", "--opt", "instances=2", *SMOKE_TRAIN]
    rows = []
    for name, opts in variants:
        rows.append(Row(name, train={dataset: {
            "smoke": smoke + opts if dataset == "SYSU" else None,
            "paper": ["--config", "configs/dppt-sysu-paper.yaml", "--data", "{data_root}/" + fmt, "--format", fmt,
                      *opts, "--device", "{device}"]} for dataset, fmt in (("SYSU", "sysu-mm01"), ("LLCM", "llcm"))}))
    columns = tuple(Column(f"{dataset} {label}", ("seen", metric), "viA" if dataset == "SYSU" else None, fmt,
                           group=dataset)
                    for dataset, fmt in (("SYSU", "sysu-mm01"), ("LLCM", "llcm"))
                    for label, metric in (("R1", "rank1"), ("mAP", "mAP"), ("mINP", "mINP")))
    return TableSpec(
        key="l2rw-table7", paper="003 L2RW+", title="Table VII: the DPPT ablation (B, +CA, +gray, +CA+MRB)",
        shows="what channel augmentation and the MRB loss add to FedAvg under camera independence (CI)",
        cost={"smoke": "synthetic visible-infrared (viA); under a minute on a CPU",
              "paper": "50 rounds ResNet-50 on SYSU-MM01 and LLCM, cameras as clients; GPU, days"},
        columns=columns, rows=tuple(rows), paper_train={"sysu-mm01": "sysu-mm01", "llcm": "llcm"},
    )


def _ska_table4() -> TableSpec:
    """Seen domains: each client's personalised model (global layers + its own norms) on its own test set.

    The "Baseline" and "Baseline+LSN" rows are Table 2's FedAvg+D and FedBN+D (paper 000 Sec. 4.3), which
    weight the average by data volume (``--opt weighting=volume``); the SKA rows keep Algorithm 1's uniform mean.
    """
    variants = (("Baseline", "false", "false", "false"), ("Baseline+AN", "true", "false", "false"),
                ("Baseline+LSN", "false", "true", "false"), ("Baseline+LSN+Dual", "false", "true", "true"),
                ("Baseline+LSN+AN", "true", "true", "false"), ("Baseline+LSN+AN+Dual", "true", "true", "true"))
    paper_data = data_args(RGB_SOURCES)
    rows = []
    for name, an, lsn, dual in variants:
        opts = ["--opt", f"an={an}", "--opt", f"lsn={lsn}", "--opt", f"dual={dual}"]
        if name in ("Baseline", "Baseline+LSN"):  # = FedAvg+D / FedBN+D of Table 2: data-volume weights
            opts += ["--opt", "weighting=volume"]
        rows.append(Row(name, train={"": {
            "smoke": ["--method", "ska", "--data", "synth", *SMOKE_TRAIN, *opts],
            "paper": ["--config", "configs/ska-paper.yaml", *paper_data, *opts, "--device", "{device}"]}}))
    seen = tuple(Column(f"{name} {label}", ("local", metric), smoke, paper)
                 for name, smoke, paper in (("Duke", "synthA", "dukemtmcreid"), ("Market", "synthB", "market1501"))
                 for label, metric in (("mAP", "mAP"), ("R1", "rank1")))
    unseen = tuple(Column(f"{name} {label}", ("dg", fmt), smoke, fmt, metric=metric)
                   for name, fmt, smoke in (("VIPeR", "viper", "synth-viper"), ("iLIDS", "ilids", "synth-ilids"))
                   for label, metric in (("mAP", "mAP"), ("R1", "rank1")))
    return TableSpec(
        key="ska-table4", paper="000 SKA", title="Table 4: the AN / LSN / dual-model ablation",
        shows="what each SKA component adds on seen (personalised) and unseen (global) domains",
        cost={"smoke": "synthetic seen domains and stand-ins; a few minutes on a CPU",
              "paper": f"100 rounds ResNet-50 on {RGB_SOURCES_TEXT}; GPU, days"},
        columns=seen + unseen, rows=tuple(rows), paper_train=RGB_SOURCES,
        deviations=("the seen-domain columns are each client's personalised model on its own test set, the unseen "
                    "ones the global model under the DG protocol (the paper does not say which model it tests on "
                    "source domains)",
                    "the Baseline and Baseline+LSN rows weight by data volume (Table 2's FedAvg+D / FedBN+D) and keep "
                    "SKA's network (the 2-FC mapping head): the ablation changes AN, LSN and the dual model only; "
                    "Wu & Gong's released code has no SKA training to check this against"),
    )


#: FedPav's nine clients (paper 004, Table 3/4): column, smoke-scale seen domain (the three synthetic clients stand
#: in for the first three), paper-scale --data-root folder
FEDPAV_CLIENTS = (("MSMT17", "synthA", "msmt17"), ("DukeMTMC", "synthB", "dukemtmcreid"),
                  ("Market", "synthC", "market1501"), ("CUHK03-NP", None, "cuhk03np"), ("PRID2011", None, "prid"),
                  ("CUHK01", None, "cuhk01"), ("VIPeR", None, "viper"), ("3DPeS", None, "3dpes"),
                  ("iLIDS-VID", None, "ilids"))
#: FedPav's federation at paper scale: --data-root folder -> the format of its client (the small datasets in FedPav's
#: client split, privreid.data.formats.dg.splits protocol "fedpav"); one --data DIR:FORMAT each
FEDPAV_TRAIN = ({"msmt17": "msmt17"}  # paper 004 Table 1: MSMT17's train + val, 32,621 images
                | {folder: RGB_SOURCES[folder] for folder in ("dukemtmcreid", "market1501", "cuhk03np")}
                | {folder: f"{folder}-fedpav" for folder in ("prid", "cuhk01", "viper", "3dpes", "ilids")})
#: the public (unlabelled, shared) data set of CC, CDW and KD (paper 004, Sec. 5.5: CUHK02, all of it)
FEDPAV_PUBLIC = {"cuhk02": "cuhk02"}
FEDPAV_PUBLIC_OPTS = ["--opt", "public_data={data_root}/cuhk02:cuhk02", "--opt", "public_size=0"]
#: where FedPav's public set differs from the paper's (Tables 4 and 5)
FEDPAV_PUBLIC_DEVIATION = ("CC, CDW and KD's public set is CUHK02's P1-P4 images (the public set pools a dataset's "
                           "train split; P5 is CUHK02's released test pair), where the paper uses all 7,264")
FEDPAV_PAPER_COST = "300 rounds ResNet-50 on nine datasets; GPU, days"
#: where FedPav's nine-client data differs from the paper's (written under Tables 3-5)
FEDPAV_DATA_DEVIATIONS = (
    "the small clients' train / test identities are privreid's seeded draw of FedPav's client split (its authors' "
    "split.json files are not published), so image counts differ from its Table 1 (`privreid data info` flags "
    "each one); PRID trains on up to 10 frames per camera of its multi_shot sequences, as FedPav's clients do, "
    "only when multi_shot/ sits beside single_shot/ (else on the 385 single-shot images, against 3,744)",
    "the paper's \"iLIDS-VID\" client is QMUL i-LIDS (119 people, 476 images: its Table 1 and its authors' "
    "meta.json), read with --format ilids",
)


def _fedpav_run(method: str, *paper: str) -> dict:
    return {"": {"smoke": ["--method", method, "--data", "synth", *SMOKE_TRAIN],
                 "paper": ["--config", "configs/fedpav-paper.yaml", *data_args(FEDPAV_TRAIN), "--method", method,
                           *paper, "--device", "{device}"]}}


def _fedpav_table4() -> TableSpec:
    rows = (Row("Benchmark", _fedpav_run("fedpav")), Row("FedNova", _fedpav_run("fednova")),
            Row("FedProx", _fedpav_run("fedprox")),
            Row("CC", _fedpav_run("fedpav-cc", *FEDPAV_PUBLIC_OPTS)),
            Row("CDW", _fedpav_run("fedpav-cdw", *FEDPAV_PUBLIC_OPTS)),
            Row("CC & CDW", _fedpav_run("fedpav-cdw-cc", *FEDPAV_PUBLIC_OPTS)))
    return TableSpec(
        key="fedpav-table4", paper="004 FedPav", title="Table 4: increase in local-model R1 over standalone training",
        shows="FedPav with client clustering (CC), cosine-distance weights (CDW) and both, against FedProx",
        cost={"smoke": "three synthetic clients; minutes on a CPU", "paper": FEDPAV_PAPER_COST},
        columns=tuple(Column(name, ("local", "rank1"), smoke, paper) for name, smoke, paper in FEDPAV_CLIENTS),
        rows=rows, reference=Row("Standalone", _fedpav_run("standalone")),
        paper_train=FEDPAV_TRAIN | FEDPAV_PUBLIC, deviations=(*FEDPAV_DATA_DEVIATIONS, FEDPAV_PUBLIC_DEVIATION),
    )


#: the beta grid of FedReID Fig. 3.  The paper's text names beta = 0 and 0.0005 (where FedReID just beats the
#: supervised model) but not the figure's other ticks; privreid's grid brackets those two by a decade each way.
FIG3_BETAS = ("0", "0.0005", "0.005")


def _fedreid_fig3() -> TableSpec:
    sources = RGB_SOURCES
    paper_data = data_args(sources)
    rows = [Row(name) for name in ("Supervised", "Random-Guess")]
    for name, mode in (("Single (Eq. 14)", "upload"), ("Double (Eq. 14+15)", "both")):
        noise = ["--beta-mode", mode]
        rows.append(Row(name, train={f"beta={b}": {
            "smoke": ["--method", "fedreid", "--data", "synth", *SMOKE_TRAIN, "--beta", b, *noise],
            "paper": ["--config", "configs/fedreid-paper.yaml", *paper_data, "--beta", b, *noise,
                      "--device", "{device}"]} for b in FIG3_BETAS}))
    return TableSpec(
        key="fedreid-fig3", paper="002 FedReID", title="Fig. 3: VIPeR R1 against the white-noise scale beta",
        shows="the utility cost of single (Eq. 14) and double (Eq. 14+15) protection",
        cost={"smoke": "synthetic VIPeR stand-in; about a minute on a CPU",
              "paper": f"100 rounds ResNet-50 on {RGB_SOURCES_TEXT}; GPU, days"},
        columns=tuple(Column(f"beta={b}", ("dg", "viper"), "synth-viper", "viper", group=f"beta={b}")
                      for b in FIG3_BETAS),
        rows=tuple(rows), paper_train=sources, figure=beta_figure,
        deviations=(
            "the text names beta = 0 and 0.0005 but not the figure's other ticks: privreid sweeps "
            + ", ".join(FIG3_BETAS),
            "the figure prints no numbers, so no published values are shown; Supervised and Random-Guess (an "
            "ImageNet model without training) are n/i",
        ),
    )


def beta_figure(spec: TableSpec, rows: list[dict], path) -> None:
    """R1 against beta, one line per protection mode (FedReID Fig. 3); rows without a number are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privreid.io import save_figure

    fig, ax = plt.subplots(figsize=(4, 3))
    for row in spec.rows:
        points = [(float(r["column"].split("=")[1]), r["privreid"]) for r in rows
                  if r["row"] == row.name and r["privreid"] is not None]
        if points:
            ax.plot(range(len(points)), [y for _, y in points], marker="o", label=row.name)
            ax.set_xticks(range(len(points)), [f"{x:g}" for x, _ in points])
    ax.set_xlabel("beta")
    ax.set_ylabel("VIPeR R1 (%)")
    ax.legend(fontsize=7)
    save_figure(fig, path, title=f"{spec.paper}, {spec.title}")


def _l2rw_table2() -> TableSpec:
    """Each FL baseline is DPPT's ``base`` with L_id + L_cir only (``mrb=false ca=none``); +I-DPPT adds CA and MRB."""
    datasets = (("SYSU", "sysu-mm01", "viA"), ("RegDB", "regdb", None), ("LLCM", "llcm", None))
    smoke = ["--method", "dppt", "--data", "synth-vi", "--protocol", "ci", "--train-domains", "viA",
             "--test-domains", "viC", "--opt", "instances=2", *SMOKE_TRAIN]
    rows = []
    for name, base in (("FedProx", "fedprox"), ("FedNova", None), ("MOON", "moon"), ("FedAvg", "fedavg")):
        for suffix, opts in (("", ["--opt", "mrb=false", "--opt", "ca=none"]), (" +AGW", None), (" +DNS", None),
                             (" +I-DPPT", [])):
            if base is None or opts is None:
                rows.append(Row(name + suffix))
                continue
            opts = ["--opt", f"base={base}", *opts]
            rows.append(Row(name + suffix, train={dataset: {
                "smoke": smoke + opts if stand_in else None,
                "paper": ["--config", "configs/dppt-sysu-paper.yaml", "--data", "{data_root}/" + fmt, "--format", fmt,
                          *opts, "--device", "{device}"]} for dataset, fmt, stand_in in datasets}))
    columns = tuple(Column(f"{dataset} {label}", ("seen", metric), stand_in, fmt, group=dataset)
                    for dataset, fmt, stand_in in datasets
                    for label, metric in (("R1", "rank1"), ("R10", "rank10"), ("mAP", "mAP"), ("mINP", "mINP")))
    return TableSpec(
        key="l2rw-table2", paper="003 L2RW+", title="Table II: FL baselines with and without I-DPPT (CI protocol)",
        shows="FedProx / MOON / FedAvg (L_id + L_cir) and the same with I-DPPT; FedNova, +AGW, +DNS n/i",
        cost={"smoke": "synthetic visible-infrared (viA); minutes on a CPU",
              "paper": "50 rounds ResNet-50 on SYSU-MM01, RegDB and LLCM, cameras as clients; GPU, days"},
        columns=columns, rows=tuple(rows),
        paper_train={"sysu-mm01": "sysu-mm01", "regdb": "regdb", "llcm": "llcm"},
        deviations=("RegDB is trial 1 only, as the paper's Table II; the authors' code (Joey623/L2RW CI/test.py:270-327) "
                    "trains one model per trial and averages the 10 trials",),
    )


#: SKA's four source clients (paper 000, Tables 2 and 4): column, smoke-scale synthetic domain, --data-root folder
SKA_SOURCES = (("Duke", "synthA", "dukemtmcreid"), ("Market", "synthB", "market1501"),
               ("CUHK03-NP", "synthC", "cuhk03np"), ("MSMT17", "synthD", "msmt17"))
#: the SKA paper reproduces every comparator "following same training process" (Sec. 4.2): its preset, their method
SKA_TABLE2_ROWS = (("local supervised", "standalone"), ("FedAvg+D", "fedavg"), ("FedProx+D", "fedprox"),
                   ("FedPav", "fedpav"), ("FedPav+AddData", "fedpav-cdw-kd"), ("FedReID", "fedreid"),
                   ("MOON+D", "moon"), ("FedBN+D", "fedbn"), ("SKA", "ska"))


def _ska_table2() -> TableSpec:
    """Seen domains, every row: each client's personalised model on its own test set (as in Table 4)."""
    paper_data = data_args(RGB_SOURCES)
    smoke_domains = ",".join(smoke for _, smoke, _ in SKA_SOURCES)
    rows = []
    for name, method in SKA_TABLE2_ROWS:
        public = ["--opt", "public_size=32"] if method == "fedpav-cdw-kd" else []
        rows.append(Row(name, train={"": {
            "smoke": ["--method", method, "--data", "synth", "--train-domains", smoke_domains, *SMOKE_TRAIN, *public],
            "paper": ["--config", "configs/ska-paper.yaml", *paper_data, "--method", method, "--device", "{device}"]}}))
    return TableSpec(
        key="ska-table2", paper="000 SKA", title="Table 2: mAP / R1 on the four source client domains",
        shows="SKA against local supervised training, FedAvg/FedProx/MOON/FedBN (+D), FedPav(+AddData) and FedReID",
        cost={"smoke": "four synthetic source domains; several minutes on a CPU",
              "paper": f"100 rounds ResNet-50 on {RGB_SOURCES_TEXT} (SKA's recipe); GPU, days"},
        columns=tuple(Column(f"{name} {label}", ("local", metric), smoke, paper)
                      for name, smoke, paper in SKA_SOURCES for label, metric in (("mAP", "mAP"), ("R1", "rank1"))),
        rows=tuple(rows), paper_train=RGB_SOURCES,
        deviations=(
            "every row's seen-domain cell is each client's personalised model as its method defines it (privreid's "
            "local evaluation: FedPav's after local training, FedAvg+D's the global model with the client's "
            "classifier, FedBN's and SKA's with the client's own norms) on its own test set; the paper does not say "
            "which model it tests on source domains (its Table 4 Baseline prints FedAvg+D's numbers, so privreid "
            "reads both tables alike)",
            "'+D' (domain-specific classifiers kept out of aggregation) is how every privreid method treats the "
            "classifier",
            "FedPav+AddData is FedPav + CDW + KD (paper 004, Alg. 3) on privreid's public set (a synthetic domain, "
            "--opt public_data); SKA does not name its additional data",
        ),
    )


def _fedpav_table3() -> TableSpec:
    rows = (Row("Centralized Training", _fedpav_run("centralized"), scope="global"),
            Row("Standalone Training", _fedpav_run("standalone"), scope="local"),
            Row("Global Model", _fedpav_run("fedpav"), scope="global", run="FedPav"),
            Row("Local Model", _fedpav_run("fedpav"), scope="local", run="FedPav"))
    return TableSpec(
        key="fedpav-table3", paper="004 FedPav", title="Table 3: global and local models of FedPav against "
                                                       "standalone and centralised training",
        shows="per-client R1 of FedPav's global and local models, standalone and centralised training",
        cost={"smoke": "three synthetic clients; a few minutes on a CPU", "paper": FEDPAV_PAPER_COST},
        columns=tuple(Column(name.replace("CUHK03-NP", "CUHK03"), ("local", "rank1"), smoke, paper)  # as printed
                      for name, smoke, paper in FEDPAV_CLIENTS),
        rows=rows, paper_train=FEDPAV_TRAIN,
        deviations=(
            *FEDPAV_DATA_DEVIATIONS,
            "the Global Model and Centralized Training cells are the run's reported global model (the mean of the "
            "3 best evaluations with the paper preset's --report-best 3; at smoke scale, its one evaluation)",
            "smoke scale: three synthetic clients stand in for MSMT17, DukeMTMC and Market; the other six have no "
            "stand-in client",
        ),
    )


def _fedpav_table5() -> TableSpec:
    comparators = ("DSTML", "UMDL", "CrossGrad", "MLDG", "SSDAL", "DIMN", "Decentralized [51]")
    rows = tuple(Row(name) for name in comparators) + (
        Row("CC & CDW", _fedpav_run("fedpav-cdw-cc", *FEDPAV_PUBLIC_OPTS)),
        Row("KD & CDW", {"": {"smoke": ["--method", "fedpav-cdw-kd", "--data", "synth", *SMOKE_TRAIN,
                                        "--opt", "public_size=32"],
                              "paper": _fedpav_run("fedpav-cdw-kd", *FEDPAV_PUBLIC_OPTS)[""]["paper"]}}))
    return TableSpec(
        key="fedpav-table5", paper="004 FedPav", title="Table 5: R1 on CAVIAR and GRID (cross-camera protocol)",
        shows="generalisation of FedPav + CC & CDW and KD & CDW to two unseen datasets, without fine-tuning",
        cost={"smoke": "synthetic CAVIAR / GRID stand-ins; a few minutes on a CPU", "paper": FEDPAV_PAPER_COST},
        columns=(Column("CAVIAR", ("dg", "caviar-crosscam"), "synth-caviar", "caviar"),
                 Column("GRID", ("dg", "grid-crosscam"), "synth-grid", "grid")),
        rows=rows, paper_train=FEDPAV_TRAIN | FEDPAV_PUBLIC, transpose=True,
        deviations=(
            *FEDPAV_DATA_DEVIATIONS,
            FEDPAV_PUBLIC_DEVIATION,
            "the paper reports one draw of the test identities; privreid averages 10 seeded draws (splits written "
            "next to each evaluation)",
            "each cell evaluates the run's final global model (its checkpoint), not the mean of the 3 best",
            "'Decentralized [51]' is FedReID (paper 002) trained on its own four-source federation; privreid does "
            "not rerun it on FedPav's nine clients, so the row stays n/i",
        ),
    )


#: FedARKS' leave-one-domain-out tasks (paper 001, Table 1): label, held-out smoke domain, held-out paper folder.
#: Smoke scale: synthA/B/C/D stand in for Market (M), CUHK02 (C2), CUHK03 (C3) and MSMT17 (MS).
FEDARKS_TASKS = (("MS+C2+C3→M", "synthA", "market1501"), ("M+C2+C3→MS", "synthD", "msmt17"),
                 ("MS+C2+M→C3", "synthC", "cuhk03np"))
FEDARKS_PAPER_COST = "40 rounds ResNet-50 on Market/CUHK02/CUHK03/MSMT17; GPU, days"
#: FedARKS' four domains at paper scale: --data-root folder -> format (CUHK02 trains on its P1-P4 identities, every
#: image: the `dg` split's train set; CUHK03 as RGB_SOURCES reads it)
FEDARKS_DOMAINS = {"market1501": RGB_SOURCES["market1501"], "cuhk02": "cuhk02", "cuhk03np": RGB_SOURCES["cuhk03np"],
                   "msmt17": "msmt17"}  # paper 001 does not say which MSMT17 list: privreid's default


def _fedarks_columns() -> tuple[Column, ...]:
    metrics = (("mAP", "mAP"), ("R1", "rank1"))
    tasks = tuple(Column(f"{task} {label}", ("global", metric), smoke, paper, group=task)
                  for task, smoke, paper in FEDARKS_TASKS for label, metric in metrics)
    means = tuple(Column(f"SAvg {label}", ("mean", metric), None, None, of=tuple(f"{t} {label}"
                                                                                  for t, _, _ in FEDARKS_TASKS))
                  for label, metric in metrics)
    return tasks + means


def _fedarks_run(method: str, *opts: str) -> dict:
    return {task: {"smoke": ["--method", method, "--data", "synth", "--test-domains", smoke, *SMOKE_TRAIN, *opts],
                   "paper": ["--config", "configs/fedarks-paper.yaml", *data_args(FEDARKS_DOMAINS),
                             "--test-domains", paper, "--method", method, *opts, "--device", "{device}"]}
            for task, smoke, paper in FEDARKS_TASKS}


def _fedarks_table1() -> TableSpec:
    implemented = {"MOON": "moon", "FedProx": "fedprox", "FedPav": "fedpav", "FedReID": "fedreid",
                   "FedARKS": "fedarks"}
    names = ("SCAFFOLD", "MOON", "FedProx", "SNR", "MixStyle", "CrossStyle", "FedPav", "FedReID", "DACS", "SSCU",
             "FedSupWA", "FedARKS", "FedPav (ViT)", "CrossStyle (ViT)", "DACS (ViT)", "FedARKS (ViT)")
    rows = tuple(Row(name, _fedarks_run(implemented[name]) if name in implemented else None) for name in names)
    return TableSpec(
        key="fedarks-table1", paper="001 FedARKS", title="Table 1: leave-one-domain-out mAP / R1 (FedDG-ReID)",
        shows="FedARKS against FL, DG and FedDG-ReID methods, each source domain a client, one domain held out",
        cost={"smoke": "three synthetic sources and one held out; a minute or two on a CPU",
              "paper": FEDARKS_PAPER_COST},
        columns=_fedarks_columns(), rows=rows, paper_train=FEDARKS_DOMAINS,
        deviations=(
            "privreid has no ViT backbone: the ViT rows stay n/i",
            "FedSupWA (AAAI'26) is named but neither defined nor cited by the paper, and its code is not released: "
            "n/i (the paper's SAvg for it, 29.2 / 45.3, is not the mean of its tasks, 28.6 / 45.4)",
            "each cell is the global model on the held-out domain's test set (query / gallery of its own "
            "protocol), the last evaluation",
            "FedARKS' body parts are fixed horizontal bands, not PifPaf keypoints (see the method's deviations)",
        ),
    )


#: FedARKS Table 3: RK off is theta = the global feature (v = 1, Eq. 1); KS off is beta = 0 (Eq. 4: equal weights)
FEDARKS_ABLATION = (("-RK -KS (both off)", ("v=1.0", "beta=0.0")), ("+RK", ("v=0.5", "beta=0.0")),
                    ("+KS", ("v=1.0", "beta=5.0")), ("+RK +KS (FedARKS)", ("v=0.5", "beta=5.0")))
#: the paper's own -RK -KS row: its numbers are Table 1's FedSupWA row, a method privreid does not implement
FEDARKS_BASELINE = "-RK -KS (FedSupWA)"


def _fedarks_table3() -> TableSpec:
    rows = (Row(FEDARKS_BASELINE),) + tuple(Row(name, _fedarks_run("fedarks", *(a for o in opts
                                                                                  for a in ("--opt", o))))
                                            for name, opts in FEDARKS_ABLATION)
    return TableSpec(
        key="fedarks-table3", paper="001 FedARKS", title="Table 3: the robust-knowledge (RK) / knowledge-selection "
                                                         "(KS) ablation",
        shows="what the body-part branch (RK) and the direction-consistency weights (KS) each add",
        cost={"smoke": "three synthetic sources and one held out; about a minute on a CPU",
              "paper": FEDARKS_PAPER_COST},
        columns=_fedarks_columns()[:-2], rows=rows, paper_train=FEDARKS_DOMAINS,
        deviations=(
            "the paper's -RK -KS row prints Table 1's FedSupWA numbers: its ablation starts from FedSupWA (AAAI'26: "
            "domain-aware parameter suppression and domain-invariant weighted aggregation), which the paper neither "
            "defines nor cites and whose code is not released, so that row is n/i; privreid's own baseline, "
            "'-RK -KS (both off)', is FedARKS with both parts off: theta = the global feature (v = 1; the part "
            "branch stays in the model but gets no gradient) and equal aggregation weights (beta = 0 in Eq. 4), "
            "and has no published counterpart; the +RK / +KS rows' published numbers are FedSupWA plus each part",
            "each cell is the global model on the held-out domain's test set, the last evaluation",
        ),
    )


#: L2RW+ Table IX's attacks, in its order (privreid.retrieval_attacks.feature_attacks names)
TABLE9_ATTACKS = (("FGSM", "fgsm"), ("PGD", "pgd"), ("BIM", "bim"), ("MIFGSM", "mifgsm"), ("TIFGSM", "tifgsm"))
#: smoke-scale corruption repeats (CIL-ReID's protocol, paper scale: 10)
TABLE9_SMOKE_REPEATS = 2


#: L2RW+'s robustness and privacy experiments (Table IX, Fig. 8): dataset, --data-root folder, smoke stand-in
L2RW_VI_DATASETS = (("SYSU", "sysu-mm01", "viA"), ("LLCM", "llcm", None))
#: the DNS deviation shared by Table IX and Fig. 8
L2RW_DNS_DEVIATION = ("DNS [16] is not implemented in privreid: at smoke scale its columns are privreid's centralised "
                      "training (`--method centralized`, ERM over the pooled clients with privreid's supervised loss), "
                      "a centralised stand-in, not DNS; at paper scale they stay empty")


def _l2rw_dns_and_ours(datasets=L2RW_VI_DATASETS) -> dict:
    """Run group -> scale -> options: per dataset, DNS's centralised stand-in and I-DPPT (FedAvg base, CI)."""
    smoke = ["--data", "synth-vi", "--protocol", "ci", "--train-domains", "viA", "--test-domains", "viC",
             *SMOKE_TRAIN]
    ours = ["--method", "dppt", "--opt", "instances=2", "--opt", "mrb=true", "--opt", "ca=channel"]
    train: dict = {}
    for dataset, fmt, stand_in in datasets:
        train[f"{dataset} DNS"] = {"smoke": ["--method", "centralized", *smoke] if stand_in else None, "paper": None}
        train[f"{dataset} Ours"] = {
            "smoke": [*ours, *smoke] if stand_in else None,
            "paper": ["--config", "configs/dppt-sysu-paper.yaml", "--data", "{data_root}/" + fmt, "--format", fmt,
                      "--opt", "mrb=true", "--opt", "ca=channel", "--device", "{device}"]}
    return train


def _l2rw_table9() -> TableSpec:
    """Every row measures the same two runs per dataset (the column's): DNS's stand-in and I-DPPT (FedAvg base)."""
    datasets = L2RW_VI_DATASETS
    train = _l2rw_dns_and_ours()
    measures = [("Clean", ("attack-clean", "pgd"))]
    for label, name in TABLE9_ATTACKS:
        measures += [(label, ("attack", name)), (f"{label} ↓", ("attack-drop", name))]
    measures += [("Corruption", ("corruption", "")), ("Corruption ↓", ("corruption-drop", ""))]
    columns = tuple(Column(f"{group} {label}", ("seen", metric), stand_in, fmt, group=group)
                    for dataset, fmt, stand_in in datasets for group in (f"{dataset} DNS", f"{dataset} Ours")
                    for label, metric in (("R1", "rank1"), ("mAP", "mAP")))
    return TableSpec(
        key="l2rw-table9", paper="003 L2RW+", title="Table IX: adversarial attacks and corruptions",
        shows="R1 / mAP of centralised training (DNS) and I-DPPT under five attacks and CIL-ReID corruptions",
        cost={"smoke": "synthetic visible-infrared (viA), 5 attacks + 2 corruption repeats; a few minutes on a CPU",
              "paper": "I-DPPT only (DNS columns empty), 50 rounds ResNet-50 on SYSU-MM01 and LLCM + attacks; GPU, "
                       "days"},
        columns=columns, rows=tuple(Row(name, train, run="model", measure=m) for name, m in measures),
        paper_train={"sysu-mm01": "sysu-mm01", "llcm": "llcm"},
        deviations=(
            L2RW_DNS_DEVIATION,
            "the paper does not state the attacks' budget: privreid uses `privreid attack`'s defaults (L_inf eps "
            "8/255, step 2.5 eps / steps (2/255 at 10 steps), 10 steps, queries attacked, feature-space loss; see privreid.retrieval_attacks)",
            "Corruption is CIL-ReID's protocol (privreid.evaluation.corrupted_eval: every image a random one of the "
            f"20 corruptions at a random severity, query and gallery); {TABLE9_SMOKE_REPEATS} repeats at smoke "
            "scale, 10 at paper scale",
            "each cell is the run's global model on its seen test set (SYSU-MM01 / LLCM's own protocol)",
        ),
    )


def _l2rw_fig8() -> TableSpec:
    """Both rows of a subject invert the column's run: the reconstruction and, as a floor, its random start."""
    from privreid.experiments.reproduce.leakage import FIG8_ATTACK, FIG8_METRICS, leakage_figure

    datasets = L2RW_VI_DATASETS[:1]
    train = _l2rw_dns_and_ours(datasets)
    rows = []
    for modality in ("visible", "infrared"):
        label = modality.capitalize()
        rows += [Row(f"{label} subject", train, run="model", measure=("inversion", modality)),
                 Row(f"{label}: random image", train, run="model", measure=("inversion-random", modality))]
    columns = tuple(Column(f"{group} {label}", ("seen", metric), stand_in, fmt, group=group,
                           decimals=1 if metric in ("psnr", "label_correct") else 3)
                    for _, fmt, stand_in in datasets for group in train for metric, label in FIG8_METRICS)
    return TableSpec(
        key="l2rw-fig8", paper="003 L2RW+", title="Fig. 8: iDLG gradient-inversion leakage, DNS against I-DPPT",
        shows="how much of one visible and one infrared training image iDLG recovers from each model's gradient",
        cost={"smoke": f"synthetic visible-infrared (viA), 2 subjects x 2 models x {FIG8_ATTACK['iterations']} "
                       "iDLG steps; a few minutes on a CPU",
              "paper": "I-DPPT only (DNS empty), 50 rounds ResNet-50 on SYSU-MM01 + 2 inversions; GPU, days"},
        columns=columns, rows=tuple(rows), paper_train={"sysu-mm01": "sysu-mm01"}, figure=leakage_figure,
        deviations=(
            L2RW_DNS_DEVIATION,
            "the paper prints its cosine similarities inside the figure's images only, not in its text, so no "
            "published values are shown; its reading is the ordering: DNS's cosine above I-DPPT's for every subject",
            "the paper does not say which training round's gradient it inverts, nor which dataset and image: "
            "privreid inverts the final checkpoint's one-image gradient (threat `full`: the whole model, head "
            "included, as iDLG assumes), for a client that trained on the subject, on SYSU-MM01 (its Table IX's "
            "first dataset), and fixes the subjects by the data: the first training image in path order of each "
            "modality, the same images for both models",
            "iDLG as in the paper (Adam, lr 0.01, 200 iterations, label inferred from the head's gradient): the "
            "`l2rw-fig8` preset (plain Adam on [0, 1] pixels from uniform noise, the last iterate), not privreid "
            "invert's default, which is a stronger attack (Inverting Gradients with signed Adam at lr 0.1, step "
            "decay, TV on the normalised image, the best iterate; docs/leakage-and-robustness.md), so the figure's "
            "leakage is the paper's attack's, a lower bound on what leaks; the "
            "filters' parameters are privreid's (the paper gives none; privreid.inversion.report); PSNR, "
            "SSIM and label recovery are privreid's additions; a random image's row is each metric's floor",
        ),
    )


TABLES: dict[str, TableSpec] = {spec.key: spec for spec in (
    _fedreid_table2(),
    _fedreid_fig3(),
    _ska_table2(),
    _ska_table4(),
    _fedpav_table3(),
    _fedpav_table4(),
    _fedpav_table5(),
    _fedarks_table1(),
    _fedarks_table3(),
    _l2rw_table2(),
    _l2rw_table7(),
    _l2rw_table9(),
    _l2rw_fig8(),
)}
