"""``fastfair report RUN_FOLDER``: one self-contained HTML file of a run folder (an experiment's
or a sweep's, finished or checkpointed): its configuration, the summary table (mean and 95 %
interval over seeds for a sweep), the per-round curves, the distribution of the clients' final
accuracies and, for a run with a device population, the tiers' participation and virtual time.
Figures are PNGs drawn by matplotlib and inlined as base64 ``data:`` URIs, so the file opens
anywhere, alone (mail it, attach it to an issue)."""

from __future__ import annotations

import base64
import datetime
import html
import json
import math
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from fastfair import _files as files
from fastfair.sim import run_files
from fastfair.sim.experiments.common import read_config
from fastfair.sim.experiments.loading import load_run
from fastfair.sim.reporting import report, sweep_report
from fastfair.sim.reporting.figures import png_base64, subplots

#: The default file name, in the run folder.
REPORT_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; } img { max-width: 100%; } .note { color: #555; font-size: 0.85em; }
details pre { font-size: 0.8em; background: #f8f8f8; padding: 0.5em; overflow-x: auto; }
"""


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _image(data: str, alt: str) -> str:
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def _file_image(path: Path, alt: str) -> str:
    return _image(base64.b64encode(path.read_bytes()).decode("ascii"), alt)


def _config_section(config: Dict[str, Any]) -> str:
    settings = config.get("config", config)
    rows = [(key, json.dumps(value, default=str)) for key, value in settings.items()]
    others = {k: v for k, v in config.items() if k != "config"}
    text = _table(["option", "value"], rows)
    if others:
        text += ("<details><summary>the rest of the run's settings</summary><pre>"
                 + html.escape(json.dumps(others, indent=1, default=str)) + "</pre></details>")
    return text


def _sweep_summary(result: Any) -> str:
    metrics = list(result.metrics)
    diff = result.baseline is not None and any(r.differences for r in result.rows)
    head = ["point", "n", *(sweep_report.label(m) for m in metrics)]
    head += [f"Δ {sweep_report.label(m)}" for m in metrics] if diff else []
    rows = []
    for row in result.rows:
        cells = [("*" if row.selected and not all(r.selected for r in result.rows) else "")
                 + row.point, str(row.n)]
        cells += [sweep_report.cell(row.values[m], m) for m in metrics]
        if diff:
            cells += [sweep_report.cell(row.differences[m], m, signed=True) if row.differences
                      else "baseline" for m in metrics]
        rows.append(cells)
    note = (f"mean ± half-width of the {sweep_report.CONFIDENCE:.0%} Student-t interval over "
            "the n seeds (none for one seed); accuracies as fractions in [0, 1]"
            + (f"; Δ: the point minus {result.baseline}, paired on seeds" if diff else "")
            + ("; *: the grid point chosen on the validation split"
               if not all(r.selected for r in result.rows) else ""))
    return _table(head, rows) + f'<p class="note">{html.escape(note)}</p>'


def _experiment_summary(result: Any) -> str:
    scored = [row for row in result.summary.values() if "diverged_round" not in row]
    columns = [c for c in report.SUMMARY_COLUMNS + report.GROUP_COLUMNS + report.AUROC_COLUMNS
               if scored and all(c[0] in row for row in scored)]
    rows = []
    for rule, row in result.summary.items():
        if "diverged_round" in row:
            rows.append([rule, *(["diverged"] * len(columns)), f"{row['seconds']:.1f}"])
            continue
        rows.append([rule, *(f"{row[key]:.4f}" for key, _ in columns), f"{row['seconds']:.1f}"])
    note = ("one seed: values of the last evaluation, no interval (a sweep over several seeds "
            "gives one); accuracies as fractions in [0, 1]; seconds of wall time")
    return (_table(["rule", *(label for _, label in columns), "seconds"], rows)
            + f'<p class="note">{html.escape(note)}</p>')


def _client_distribution(finals: Dict[str, np.ndarray]) -> Optional[str]:
    """A box per run (or grid point) of the clients' final accuracies; None without any."""
    finals = {name: values for name, values in finals.items() if len(values)}
    if not finals:
        return None
    fig, ax = subplots(figsize=(max(6.0, 0.9 * len(finals) + 2), 4.2))
    ax.boxplot(list(finals.values()), showmeans=True)
    ax.set_xticks(range(1, len(finals) + 1), list(finals), rotation=30, ha="right")
    ax.set(ylabel="final test accuracy of a client", ylim=(-0.02, 1.02),
           title="the clients' final accuracies (box: quartiles; triangle: mean)")
    ax.grid(alpha=0.3)
    return _image(png_base64(fig), "per-client final accuracy")


def _population(histories: Dict[str, List[Dict[str, Any]]]) -> Optional[str]:
    """The tiers' kept rate at the last round and the virtual hours over rounds, per run;
    None for runs without a device population."""
    runs = {name: h for name, h in histories.items() if h and "virtual_time" in h[-1]}
    if not runs:
        return None
    fig, axes = subplots(1, 2, figsize=(12, 4.2))
    tiers = sorted(int(k[len("participation_tier"):]) for k in next(iter(runs.values()))[-1]
                   if k.startswith("participation_tier"))
    width = 0.8 / max(1, len(runs))
    for i, (name, history) in enumerate(runs.items()):
        last = history[-1]
        axes[0].bar([g + i * width for g in range(len(tiers))],
                    [last.get(f"participation_tier{g}", math.nan) for g in tiers], width,
                    label=name)
        axes[1].plot([r["round"] for r in history],
                     [r["virtual_time"] / 3600 for r in history], label=name)
    axes[0].set_xticks([g + 0.4 - width / 2 for g in range(len(tiers))],
                       [f"tier {g}" for g in tiers])
    axes[0].set(ylabel="share of rounds a client was kept", title="participation by tier")
    axes[1].set(xlabel="round", ylabel="virtual hours", title="virtual time")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, names = axes[1].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    return _image(png_base64(fig), "device population")


def _figures(result: Any, sweep: bool) -> List[Tuple[str, str]]:
    """``(heading, HTML)`` of each figure of ``result``."""
    sections = []
    with tempfile.TemporaryDirectory(prefix="fastfair-report-") as tmp:
        tmp_path = Path(tmp)
        if sweep:
            scored = [run for run in result.runs if run.history]
            if scored:
                curves = sweep_report.plot_curves(tmp_path / run_files.CURVES_PNG, scored)
                tradeoff = sweep_report.plot_tradeoff(tmp_path / run_files.TRADEOFF_PNG, scored)
                sections += [("Per-round curves", _file_image(curves, "curves")),
                             ("Fairness trade-off", _file_image(tradeoff, "trade-off"))]
            finals: Dict[str, List[np.ndarray]] = {}
            for run in result.runs:
                finals.setdefault(run.point, []).append(np.asarray(run.final))
            pooled = {p: np.concatenate(v) for p, v in finals.items()}
            histories = {f"{run.point}/seed{run.seed}": run.history for run in result.runs}
        else:
            fairness, _ = report.plot(tmp_path, result.histories, result.finals, "")
            sections.append(("Per-round curves", _file_image(fairness, "curves")))
            pooled = {rule: np.asarray(v) for rule, v in result.finals.items()}
            histories = result.histories
    distribution = _client_distribution(pooled)
    if distribution:
        sections.append(("Per-client final accuracy" + (" (every seed's clients pooled)"
                                                        if sweep else ""), distribution))
    population = _population(histories)
    if population:
        sections.append(("Device population", population))
    return sections


def render(folder: Union[str, Path]) -> str:
    """The HTML report of the run folder ``folder`` (see the module docstring), as text.

    Raises
    ------
    ValueError
        ``folder`` is not a run folder (as :func:`~fastfair.sim.load_run` says).
    """
    from fastfair.sim.experiments.sweep_result import SweepResult

    folder = Path(folder)
    result = load_run(folder)
    sweep = isinstance(result, SweepResult)
    title = f"fastfair {'sweep' if sweep else 'run'}: {folder.name}"
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f'<p class="note">{html.escape(str(folder.resolve()))}; report written '
             f"{datetime.date.today().isoformat()}.</p>",
             "<h2>Summary</h2>", _sweep_summary(result) if sweep else _experiment_summary(result)]
    for heading, body in _figures(result, sweep):
        parts += [f"<h2>{html.escape(heading)}</h2>", body]
    config = read_config(folder, run_files.SWEEP_CONFIG if sweep else run_files.EXPERIMENT_CONFIG)
    parts += ["<h2>Configuration</h2>", _config_section(config), "</body></html>"]
    return "\n".join(parts) + "\n"


def write_report(folder: Union[str, Path], out: Optional[Union[str, Path]] = None) -> Path:
    """Writes :func:`render`'s report of ``folder`` to ``out`` (default
    ``folder/report.html``) in one piece; returns its path."""
    path = Path(out) if out is not None else Path(folder) / REPORT_NAME
    text = render(folder)
    with files.atomic(path, text=True) as f:
        f.write(text)
    return path
