"""``fastfair report``: one self-contained HTML file of a run folder."""

from __future__ import annotations

import base64
from html.parser import HTMLParser

import pytest

from fastfair import cli
from fastfair.sim import Experiment, SimulationConfig, Sweep
from fastfair.sim.experiments.html_report import render, write_report
from fastfair.sim.reporting.sweep_report import cell

PNG = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """The headings, table cells, and every URL the page would fetch."""

    def __init__(self):
        super().__init__()
        self.headings, self.cells, self.sources, self._in = [], [], [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.sources += [attrs[k] for k in ("src", "href") if k in attrs]
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "h2":
            self.headings.append(data)
        elif self._in in ("td", "th"):
            self.cells.append(data)


def _page(text):
    page = _Page()
    page.feed(text)
    return page


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "sweep"
    config = SimulationConfig(clients=30, per_round=6, rounds=4, eval_every=2, dataset="grouped",
                              groups=3, population="devices",
                              population_options={"tier_by_group": True})
    result = Sweep(config, rules=["fedavg", "afl"], seeds=[0, 1], baseline="fedavg", out=out,
                   progress=False).run()
    return out, result


def test_a_sweeps_report_holds_its_table_figures_and_config_and_nothing_outside(sweep_folder):
    out, result = sweep_folder
    path = write_report(out)
    assert path == out / "report.html"
    page = _page(path.read_text())
    assert page.headings == ["Summary", "Per-round curves", "Fairness trade-off",
                             "Per-client final accuracy (every seed's clients pooled)",
                             "Device population", "Configuration"]
    afl = next(r for r in result.rows if r.rule == "afl")
    assert cell(afl.values["acc_mean"], "acc_mean") in page.cells       # mean ± interval
    assert cell(afl.differences["acc_mean"], "acc_mean", signed=True) in page.cells
    assert "±" in cell(afl.values["acc_mean"], "acc_mean")
    assert page.cells[page.cells.index("clients") + 1] == "30"
    assert len(page.sources) == 4                                       # the figures, inlined
    for source in page.sources:
        head, _, data = source.partition(",")
        assert head == "data:image/png;base64" and base64.b64decode(data).startswith(PNG)


def test_one_seeds_run_has_no_interval_and_no_population(tmp_path):
    out = tmp_path / "run"
    Experiment(SimulationConfig(clients=12, per_round=4, rounds=2, eval_every=2),
               rules=["fedavg", "term"], out=out, progress=False).run()
    page = _page(render(out))
    assert page.headings == ["Summary", "Per-round curves", "Per-client final accuracy",
                             "Configuration"]
    assert "term" in page.cells and not any("±" in c for c in page.cells)
    assert all(s.startswith("data:image/png;base64,") for s in page.sources)


def test_the_command_writes_the_file_and_refuses_a_folder_that_is_no_run(tmp_path, capsys,
                                                                        sweep_folder):
    out, _ = sweep_folder
    target = tmp_path / "r.html"
    assert cli.main(["report", str(out), "--out", str(target)]) == 0
    assert target.read_text().startswith("<!DOCTYPE html>")
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == 2
    assert "fastfair report: error:" in capsys.readouterr().err
