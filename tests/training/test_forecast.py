"""The forecast: a saturating curve recovered from points drawn off one, a band, the samples a target needs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from server.cli import app
from training.forecast import Fit, ForecastError, fit_curve, forecast, load_results, plot_scaling


def _runs(fit: Fit, sizes: list[int], offsets: dict[str, float], regenerated: bool = True) -> list[dict]:
    return [{"samples": n, "eval_set": s, "regenerated": regenerated, "accept_length": fit.predict(n) + off}
            for n in sizes for s, off in offsets.items()]


def test_the_fit_recovers_a_known_curve_and_inverts_it() -> None:
    truth = Fit(a=3.2, b=6.0, c=0.35, sse=0.0)
    sizes = [400, 800, 1600, 4800, 16000]
    fit = fit_curve([float(n) for n in sizes], [truth.predict(n) for n in sizes])
    assert abs(fit.a - 3.2) < 0.05 and abs(fit.c - 0.35) < 0.03
    assert abs(fit.needed(2.8) - truth.needed(2.8)) / truth.needed(2.8) < 0.1
    assert fit.needed(3.5) == float("inf")  # above the ceiling


def test_forecast_has_a_band_that_holds_the_point_estimate_and_ignores_the_control() -> None:
    truth = Fit(a=3.0, b=5.0, c=0.4, sse=0.0)
    runs = _runs(truth, [400, 800, 1600, 4800, 16000], {"alpaca": 0.1, "gsm8k": -0.2, "qa": 0.05, "humaneval": 0.3})
    runs += _runs(Fit(a=1.5, b=1.0, c=0.5, sse=0.0), [1600, 16000], {"alpaca": 0.0}, regenerated=False)
    fc = forecast(runs, target_accept=2.5)
    assert fc["eval_sets"] == ["alpaca", "gsm8k", "humaneval", "qa"]
    lo, hi = fc["samples_needed_band_10_90"]
    assert lo is not None and lo <= fc["samples_needed"] and (hi is None or fc["samples_needed"] <= hi)
    assert all(b[0] <= b[1] for b in fc["band_10_90"])
    with pytest.raises(ForecastError, match="at least 3 data sizes"):
        forecast(_runs(truth, [400, 800], {"alpaca": 0.0}), target_accept=2.5)


def test_rows_of_another_prompt_source_sit_beside_the_curve_and_are_never_fitted(tmp_path: Path) -> None:
    """A point trained on target-written prompts (`source`) at a size of its own must not bend the curve's fit."""
    truth = Fit(a=3.0, b=5.0, c=0.4, sse=0.0)
    runs = _runs(truth, [400, 1600, 4800, 16000], {"alpaca": 0.0, "qa": 0.1})
    alone = forecast(runs, target_accept=2.5, boot=20)
    written = [{**r, "source": "target-written", "accept_length": r["accept_length"] - 0.4}
               for r in _runs(truth, [11770], {"alpaca": 0.0, "qa": 0.1})]
    beside = forecast(runs + written, target_accept=2.5, boot=20)
    assert beside["samples_needed"] == alone["samples_needed"] and beside["fit"] == alone["fit"]
    unmarked = forecast(runs + [{k: v for k, v in r.items() if k != "source"} for r in written], target_accept=2.5,
                        boot=20)
    assert unmarked["fit"] != alone["fit"]  # the same rows without the mark would have been fitted
    doc = {"target": "t", "runs": runs + written}
    assert plot_scaling(doc, tmp_path / "s.png").stat().st_size > 1000


def test_points_that_steepen_in_log_data_are_flagged_and_the_cli_says_so(tmp_path: Path) -> None:
    """The closed loop's own curve (mean AL at 400..48K samples, fifth GPU session): every step gains more per
    doubling than the one before, which no saturating curve follows; a concave one is not flagged."""
    measured = {400: 1.151, 1600: 1.330, 4800: 1.497, 16000: 1.775, 32000: 2.120, 48000: 2.464}
    runs = [{"samples": n, "eval_set": "all", "regenerated": True, "accept_length": al} for n, al in measured.items()]
    fc = forecast(runs, target_accept=2.5, boot=20)
    assert fc["steepening"] and fc["top_above_fit"] > 0.1
    assert fc["gain_per_doubling"][-1] == pytest.approx(0.344 / math.log2(1.5), abs=1e-3)
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps({"runs": runs}))
    result = CliRunner().invoke(app, ["forecast", str(path), "--target-accept", "2.5"])
    assert result.exit_code == 0 and "the points steepen" in result.output, result.output
    concave = forecast(_runs(Fit(a=3.0, b=5.0, c=0.4, sse=0.0), [400, 1600, 4800, 16000], {"a": 0.0}),
                       target_accept=2.5, boot=20)
    assert not concave["steepening"]


def test_cli_prints_the_answer_and_writes_a_png(tmp_path: Path) -> None:
    truth = Fit(a=2.9, b=4.0, c=0.3, sse=0.0)
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps({"target": "t", "runs": _runs(truth, [400, 1600, 16000], {"a": 0.0, "b": 0.1})}))
    result = CliRunner().invoke(app, ["forecast", str(path), "--target-accept", "2.5"])
    assert result.exit_code == 0, result.output
    assert "needs about" in result.output and (tmp_path / "scaling_forecast.png").stat().st_size > 5000
    doc = {**json.loads(path.read_text()),
           "forecast": forecast(json.loads(path.read_text())["runs"], target_accept=2.5)}
    measured = plot_scaling(doc, tmp_path / "scaling.png")  # the per-set plot is another picture
    assert measured.read_bytes() != (tmp_path / "scaling_forecast.png").read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    refused = CliRunner().invoke(app, ["forecast", str(bad)])
    assert refused.exit_code == 1 and "no `runs` list" in refused.output
    for run in ({"samples": "400", "eval_set": "a", "accept_length": 1.2}, {"samples": 400, "eval_set": "a"},
                {"samples": 400, "eval_set": "a", "accept_length": float("nan")}, "row"):
        bad.write_text(json.dumps({"runs": [run]}).replace("NaN", "NaN"))
        hostile = CliRunner().invoke(app, ["forecast", str(bad)])
        assert hostile.exit_code == 1 and "run 0 needs samples" in hostile.output, hostile.output
        assert "Traceback" not in hostile.output


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"{not json", b"[1, 2]"])
def test_unreadable_results_are_one_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "scaling.json"
    path.write_bytes(content)
    with pytest.raises(ForecastError, match=r"cannot read|holds no `runs` list"):
        load_results(path)
