"""The compare report's figures read at a glance (issue 40, item 8): bars from 0, error bars only where there is a
spread, legends outside the data."""

import numpy as np
import pytest

from privreid.reporting import suite


@pytest.fixture
def captured(monkeypatch):
    """The figure each plot function draws, before it is written."""
    figures = []

    def keep(fig, path, title=None):
        figures.append(fig)
        return path

    monkeypatch.setattr(suite, "save_figure", keep)
    return figures


def drop_rows(model, attack, drops):
    return [{"model": model, "attack": attack, "drop_mAP": d, "testset": f"t{i}"} for i, d in enumerate(drops)]


def error_bars(ax):
    return [c for c in ax.containers if getattr(c, "errorbar", None) is not None and c.errorbar is not None]


def test_drops_start_at_zero_and_one_test_set_draws_no_error_bar(captured, tmp_path):
    # two close drops (30 % and 32 %) on one test set: the axis holds 0, so they do not look like a cliff
    rows = drop_rows("central", "pgd", [0.30]) + drop_rows("fedpav", "pgd", [0.32])
    suite.plot_drops(rows, [], tmp_path / "drops.png")
    (ax,) = captured[0].axes[:1]
    low, high = ax.get_ylim()
    assert low == 0.0 and high > 32
    assert error_bars(ax) == []
    assert "mean ± std" not in ax.get_ylabel()
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["30.0", "32.0"]


def test_drops_over_several_test_sets_show_mean_and_std(captured, tmp_path):
    rows = drop_rows("central", "pgd", [0.2, 0.4]) + drop_rows("central", "fgsm", [-0.1, 0.1])
    suite.plot_drops(rows, [], tmp_path / "drops.png")
    ax = captured[0].axes[0]
    assert len(error_bars(ax)) == 1 and "mean ± std" in ax.get_ylabel()
    assert ax.get_ylim()[0] < -10  # a negative drop's bar and its error bar are inside the axis
    assert [t.get_text() for t in ax.texts] == ["30.0±10.0", "0.0±10.0"]
    legend = captured[0].axes[0].get_legend()
    assert legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # beside the data, not over it


def test_inversion_bars_from_zero_explain_the_baseline_tick_and_keep_the_legend_outside(captured, tmp_path):
    def summary(cos, psnr, subjects):
        one = lambda m, sd: {"mean": m, "std": sd}  # noqa: E731
        return {"attack": {"feature_cosine": one(cos, 0.1), "psnr": one(psnr, 1.0)},
                "random": {"feature_cosine": one(0.1, 0.0), "psnr": one(8.0, 0.0)}, "subjects": subjects}

    single = [{"name": "central", "summary": summary(0.8, 14.0, 1)}, {"name": "fedpav", "summary": summary(0.7, 13.0, 1)}]
    suite.plot_inversion("shared", single, [], tmp_path / "inversion.png")
    fig = captured[0]
    for ax in fig.axes:
        assert ax.get_ylim()[0] <= 0.0
        assert error_bars(ax) == []  # one subject: no spread to draw
    legend = fig.axes[-1].get_legend()
    assert "a random image (baseline)" in [t.get_text() for t in legend.get_texts()]
    assert legend.get_bbox_to_anchor().x0 >= fig.axes[-1].get_window_extent().x1 - 1
    assert np.isclose(fig.axes[1].patches[0].get_height(), 14.0)


def test_inversion_grid_captions_say_the_file_and_the_model_s_own_class(monkeypatch, tmp_path):
    import torch

    from privreid.inversion import Reconstruction
    from privreid.inversion import report

    assert report.subject_caption({"index": 3, "path": "/d/train/0012_c1s1_000151_00.jpg", "label": 54,
                                   "inferred_label": 54}) == "#3 0012_c1s1_000151_00\nhead class 54, inferred 54"
    assert report.subject_caption({"index": None, "path": None, "label": 7}) == "head class 7"
    figures = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path, title=None: figures.append((fig, title)) or path)
    image = torch.zeros(3, 8, 4)
    rec = Reconstruction(subject=image, reconstruction=image, baseline=image, label=1, inferred_label=None,
                         label_rule=None)
    report.save_grid(tmp_path / "grid.png", [rec], captions=["#0 a\nhead class 1"], title="m: ig")
    fig, title = figures[0]
    label = fig.axes[0].yaxis.label
    assert label.get_text() == "#0 a\nhead class 1" and label.get_rotation() == 0 and label.get_fontsize() >= 8
    assert title.startswith("m: ig\n") and "own head" in title.replace("\n", " ")
