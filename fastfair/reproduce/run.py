"""Running a table (:class:`~fastfair.reproduce.table.TableSpec`): every column as one sweep of
its rules over the table's seeds, then the paper's numbers beside ours with a verdict, written
as Markdown (``table.md``), CSV (``table.csv``) and JSON (``table.json``).

The verdict is on the paper's claim, the difference between a rule and the baseline in the
same column, which the paper's setting and a reduced one share (absolute levels move with the
rounds and the model; the table shows them and their gap to the paper without a verdict).
With D the paper's difference and ``d ± h`` ours (mean and half-width of the 95 % Student-t
interval of the differences paired on seeds), :func:`verdict` says:

- **reproduced**: ``|D| >= tie`` and our interval lies wholly on D's side of 0; or
  ``|D| < tie`` (the paper finds no difference) and our interval lies within ``[-tie, tie]``;
- **within noise**: our interval holds 0 (with ``|D| >= tie``: the seeds cannot tell the
  difference's sign; with ``|D| < tie``: no difference, as in the paper, but too wide an
  interval to bound it by ``tie``), or there is one seed only (no interval);
- **not reproduced**: our interval excludes 0 on the side opposite to D, or (``|D| < tie``)
  excludes 0 where the paper finds no difference, or (``|D| >= tie``) lies within
  ``[-tie, tie]``: ours is bounded below a difference the table counts where the paper finds
  one (the mirror of the second "reproduced").

Where the paper's number is not available (a column's ``claim`` gives only the sign it
claims), the sign is judged as a difference of that sign.

**Only converged runs get a verdict.** :func:`convergence` reads each rule's curve of the
metric over the evaluations of its runs: the *drift* is the mean over seeds of the range
(largest minus smallest value) of the metric over the last :data:`CONVERGENCE_WINDOW` of a
run's evaluations (at least :data:`CONVERGENCE_MIN_EVALS` of them), and the *limit* is the
larger of the spread across seeds (the sample standard deviation of the final values) and the
table's ``tie``. The rule's runs have converged when drift <= limit: the metric moves less at
the end of a run than the seeds differ (or than the table's "no difference"), so where the run
stops does not decide the comparison. A row whose rule or baseline has not converged says
**not converged** instead of a verdict; with fewer than :data:`CONVERGENCE_MIN_EVALS`
evaluations the check cannot be made (``converged`` is None, shown as "unchecked") and the
verdict stands with that mark.

**The smallest detectable difference** of a row is ``h``, the half-width of its paired 95 %
interval: at these seeds and this spread of the differences, a mean difference of magnitude
below ``h`` leaves the interval holding 0. A power-based minimum is larger still: with 80 %
power, :math:`(t_{0.975} + t_{0.8}) / t_{0.975}` times ``h`` (1.25 h at 3 seeds, 1.34 h at 5,
1.43 h for many).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fastfair import _files as files
from fastfair import _machine
from fastfair.reproduce import column as columns
from fastfair.reproduce.prepare import data_folder
from fastfair.reproduce.table import Column, TableSpec, column_folder
from fastfair.sim import run_files
from fastfair.sim.reporting.stats import mean_ci, paired_difference


def shown_scale(metric: str) -> float:
    """The factor a table shows ``metric`` with, in the papers' units: a variance of
    accuracies in %² (1e4), accuracies and AUROC (``acc_*``, ``auroc_*``, ``val_`` ones too) in
    % (100), everything else (losses, Gini) as recorded (1)."""
    base = metric[4:] if metric.startswith("val_") else metric
    if base == "acc_variance":
        return 1e4
    if base.startswith(("acc_", "auroc_")) and not base.startswith("acc_gini"):
        return 100.0
    return 1.0


#: The verdicts, best first.
VERDICTS = ("reproduced", "within noise", "not reproduced")
#: What a row says instead of a verdict when its rule's or its baseline's runs have not
#: converged (:func:`convergence`).
NOT_CONVERGED = "not converged"
#: The share of a run's evaluations, the last ones, the convergence check reads.
CONVERGENCE_WINDOW = 0.25
#: The fewest evaluations that window holds; a run with fewer in all is not checked.
CONVERGENCE_MIN_EVALS = 3
#: The keys of each row of ``table.json``; ``table.csv`` has them and then ``machine``.
FIELDS = ("column", "metric", "rule", "paper", "ours_mean", "ours_half", "seeds", "paper_diff",
          "ours_diff", "ours_diff_half", "converged", "drift", "drift_limit", "verdict", "why",
          "seconds", "diverged")
#: The verdict of a row with no seed left to judge: every counted run diverged.
DIVERGED = "diverged"



@dataclass
class Row:
    """One rule of one column on one metric (the table's, or one of its ``also``): the
    paper's value, ours (mean and half-width of the 95 % interval over ``seeds``, in %, a
    variance in %²; ``seeds``: those counted), the differences to the baseline (None for the
    baseline itself or where the paper gives no number; ``ours_diff_half`` is also the smallest
    difference the seeds could detect), whether the rule's runs converged with their drift and
    its limit (:func:`convergence`; None where too few evaluations were recorded to check), the
    verdict and its reason, the column's wall time in seconds, and which seeds diverged (``""``
    when none did), left out of every number of the row."""

    column: str
    metric: str
    rule: str
    paper: Optional[float]
    ours_mean: float
    ours_half: float
    seeds: int
    paper_diff: Optional[float]
    ours_diff: Optional[float]
    ours_diff_half: Optional[float]
    converged: Optional[bool]
    drift: Optional[float]
    drift_limit: Optional[float]
    verdict: str
    why: str
    seconds: float
    diverged: str = ""


@dataclass
class TableResult:
    """A table's rows, its wall time (the sum of its columns'), the load average (1 minute)
    at its start and end, the seeds, whether it ran the paper's full setting, the command
    that regenerates it, the machine (:func:`fastfair._machine.describe`) and the columns
    not run yet (none once the table is complete)."""

    spec: TableSpec
    rows: List[Row]
    seconds: float
    load: Tuple[float, float]
    seeds: List[int]
    full: bool
    command: str
    machine: Dict[str, Any] = field(default_factory=dict)
    pending: List[str] = field(default_factory=list)


def verdict(paper_diff: Optional[float], diff: float, half: float, tie: float,
            direction: Optional[int] = None) -> Tuple[str, str]:
    """``(verdict, why)`` of our paired difference ``diff ± half`` (in %) against the paper's
    ``paper_diff`` (None: the paper gives no number), by the module's rule.

    Parameters
    ----------
    paper_diff
        D, the paper's rule-minus-baseline difference in points.
    diff, half
        d and h: our mean difference and the half-width of its 95 % interval (NaN for one
        seed).
    tie
        Differences below it in magnitude are the paper's "no difference".
    direction
        Where the paper gives no number: the sign of the difference it claims (+1, -1),
        judged as a difference of that sign; None: no claim to judge.

    Returns
    -------
    tuple of str
        One of :data:`VERDICTS` (or ``"no paper number"``) and a one-line reason.
    """
    ours = f"ours {diff:+.1f} ± {half:.1f}" if math.isfinite(half) else f"ours {diff:+.1f}"
    if paper_diff is None and direction is None:
        return "no paper number", f"{ours}; the paper gives no number to compare"
    if not math.isfinite(half):
        return "within noise", f"{ours} from one seed: no interval to judge the sign by"
    low, high = diff - half, diff + half
    small = -tie <= low and high <= tie
    if paper_diff is None:
        side = "higher" if direction == 1 else "lower"
        if small:
            return "not reproduced", (f"paper: {side} (no number here); {ours} within ±{tie}: "
                                      "no difference the table counts")
        if (low > 0 and direction == 1) or (high < 0 and direction == -1):
            return "reproduced", f"paper: {side} (no number here); {ours} excludes 0 that way"
        if low <= 0 <= high:
            return "within noise", f"paper: {side} (no number here); {ours} holds 0"
        return "not reproduced", (f"paper: {side} (no number here); {ours} excludes 0 the "
                                  "other way")
    if abs(paper_diff) < tie:
        if -tie <= low and high <= tie:
            return "reproduced", f"paper {paper_diff:+.1f} (no difference); {ours} within ±{tie}"
        if low <= 0 <= high:
            return "within noise", (f"paper {paper_diff:+.1f} (no difference); {ours} holds 0 "
                                    f"but is wider than ±{tie}")
        return "not reproduced", (f"paper {paper_diff:+.1f} (no difference); {ours} excludes "
                                  "0")
    if small:
        return "not reproduced", (f"paper {paper_diff:+.1f}; {ours} within ±{tie}: no "
                                  "difference the table counts")
    if (low > 0 and paper_diff > 0) or (high < 0 and paper_diff < 0):
        return "reproduced", f"paper {paper_diff:+.1f}; {ours} excludes 0 on the paper's side"
    if low <= 0 <= high:
        return "within noise", f"paper {paper_diff:+.1f}; {ours} holds 0: sign not settled"
    return "not reproduced", f"paper {paper_diff:+.1f}; {ours} excludes 0 on the other side"


def convergence(curves: Sequence[Sequence[float]], tie: float
                ) -> Tuple[Optional[bool], Optional[float], Optional[float]]:
    r"""``(converged, drift, limit)`` of one rule's runs from their curves of the metric
    (one per seed, its values at the run's evaluations in order, in the table's units).

    With n evaluations per run, the window is the last
    :math:`w = \max(3, \lceil 0.25\, n \rceil)` of them (:data:`CONVERGENCE_WINDOW`,
    :data:`CONVERGENCE_MIN_EVALS`). For seeds s = 1..S with values :math:`m_s(e)`:

    .. math::
        \text{drift} = \frac1S \sum_s \Big(\max_{e \in W} m_s(e) - \min_{e \in W} m_s(e)
        \Big), \qquad
        \text{limit} = \max\big(\operatorname{sd}_s m_s(n),\ \text{tie}\big)

    (sd with ddof 1; 0 for one seed) and the runs have converged when drift <= limit.

    Parameters
    ----------
    curves
        ``[S][n_s]``: each seed's values; runs with fewer than 3 values are not checked.
    tie
        The table's "no difference", in the same units.

    Returns
    -------
    tuple
        ``(True or False, drift, limit)``, or ``(None, None, None)`` where some run has
        fewer than :data:`CONVERGENCE_MIN_EVALS` evaluations.
    """
    if not curves or any(len(c) < CONVERGENCE_MIN_EVALS for c in curves):
        return None, None, None
    ranges, finals = [], []
    for curve in curves:
        values = np.asarray(curve, dtype=np.float64)
        window = max(CONVERGENCE_MIN_EVALS, math.ceil(CONVERGENCE_WINDOW * values.size))
        late = values[-window:]
        ranges.append(float(late.max() - late.min()))
        finals.append(float(values[-1]))
    drift = float(np.mean(ranges))
    spread = float(np.std(finals, ddof=1)) if len(finals) > 1 else 0.0
    limit = max(spread, tie)
    return drift <= limit, drift, limit


def run_table(spec: TableSpec, data_dir: Optional[str], out: Path, *, full: bool = False,
              progress: bool = False, command: str = "",
              on_column: Optional[Callable[[str, float], None]] = None, device: str = "cpu",
              threads: Optional[int] = 1, checkpoint_every: int = 0,
              resume: bool = False) -> TableResult:
    """Runs every column of ``spec`` (one sweep of its rules over ``spec.seeds``, written
    into ``out/<column>/``) and writes ``table.md``, ``table.csv`` and ``table.json`` into
    ``out`` after every column, so that a table stopped (a signal, a crash, a time limit)
    keeps the columns it finished and ``resume`` finishes it.

    Parameters
    ----------
    spec
        The table (its seeds as given; :func:`~fastfair.reproduce.table.replace_seeds`).
    data_dir
        The folder holding the data sets' folders (``mnist/``, ...); needed by columns that
        read files.
    out
        The output folder (created; must be empty or absent unless ``resume``).
    full
        Run the paper's full setting (the table file's ``[full]``).
    progress
        Progress bars on standard error.
    command
        The command line recorded in the outputs.
    on_column
        Called with each column's name and wall time once it is done.
    device, threads
        Where the columns' runs train (``cpu``, ``cuda``, ``cuda:N``) and with how many torch
        and kernel threads (None: the process's), as for ``fastfair simulate``; recorded with
        the CPU model and GPU name in the outputs.
    checkpoint_every
        Each column's sweep saves a checkpoint every N rounds (0: never), from which
        ``resume`` continues a column stopped part way.
    resume
        Finish the table already started in ``out``: a column whose sweep finished is read
        back (:func:`~fastfair.sim.experiments.loading.load_run`), one with a checkpoint
        continues from it, one without is run again; the outputs equal an uninterrupted
        run's but wall times.

    Returns
    -------
    TableResult

    Raises
    ------
    fastfair.sim.experiments.stopping.Interrupted
        SIGINT or SIGTERM stopped a column (under
        :func:`~fastfair.sim.experiments.stopping.graceful_signals`); its ``out`` is the
        table's folder, which ``resume`` finishes.
    """
    from fastfair.sim.experiments import stopping

    needs = sorted({c.data for c in spec.columns if c.data is not None})
    if needs and (data_dir is None or not os.path.isdir(data_dir)):
        raise ValueError(f"table {spec.name} reads {', '.join(needs)}: --data-dir must be the "
                         f"folder holding them; got {data_dir!r}")
    if resume and not out.is_dir():
        raise ValueError(f"--resume {out}: no such table folder to finish")
    if not resume and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} must be an empty folder or absent")
    plans = []
    for column in spec.columns:  # every column checked before any runs
        folder = data_folder(data_dir, column.data) if column.data and data_dir else None
        config = dataclasses.replace(spec.config(column, full, folder), device=device)
        plans.append((column, spec.run_file(column, full), config, folder))
    out.mkdir(parents=True, exist_ok=True)
    table = TableResult(spec, [], 0.0, (os.getloadavg()[0], math.nan), list(spec.seeds), full,
                        command, _machine.describe(device, threads),
                        [column.name for column in spec.columns])
    work = [len(run.rules or []) * len(spec.seeds) * config.rounds for _, run, config, _ in plans]
    spent: List[Tuple[float, int]] = []  # (seconds, work) of the columns run by this call
    for i, (column, run, config, folder) in enumerate(plans):
        columns.log_column(i, plans, work, spent)
        begun = time.perf_counter()
        try:
            result, ran = columns.run_column(spec, column, run, config, folder,
                                             out / column_folder(column.name), progress, threads,
                                             checkpoint_every, resume)
        except stopping.Interrupted as stop:
            stop.out, stop.saved = out, True  # the finished columns are written: resumable
            raise
        seconds = time.perf_counter() - begun if ran else result.seconds
        if ran:
            spent.append((seconds, work[i]))
        for metric in (spec.metric, *spec.also):
            finished = [r for r in result.runs if r.diverged_round is None]
            table.rows += column_rows(
                spec, column, metric, {(r.rule, r.seed): r.last(metric) for r in finished},
                run.rules or [], seconds,
                diverged={(r.rule, r.seed): t for r in result.runs
                          if (t := r.diverged_round) is not None},
                curves={(r.rule, r.seed): r.curve(metric)[1] for r in finished})
        table.seconds += seconds
        table.pending.remove(column.name)
        table.load = (table.load[0], os.getloadavg()[0])
        write_outputs(table, out)
        if on_column is not None:
            on_column(column.name, seconds)
    return table


def column_rows(spec: TableSpec, column: Column, metric: str,
                values: Dict[Tuple[str, int], float], rules: Sequence[str],
                seconds: float,
                diverged: Optional[Dict[Tuple[str, int], int]] = None,
                curves: Optional[Dict[Tuple[str, int], Sequence[float]]] = None) -> List[Row]:
    """The rows of one column on ``metric`` from each run's final value
    (``{(rule, seed): value}``, a fraction), shown as
    :func:`shown_scale` shows it (accuracies and AUROC in %, a variance
    in %²): per rule its mean and interval over the table's seeds and,
    beside the baseline, the paired difference to it with the :func:`verdict` (the paper's
    numbers are on the table's metric; the ``also`` metrics have none). ``curves``
    (``{(rule, seed): [n] values at the run's evaluations}``, fractions) feed each rule's
    :func:`convergence`; a rule whose runs, or whose baseline's runs, have not converged
    gets :data:`NOT_CONVERGED` instead of a verdict. Without ``curves`` nothing is checked.

    The runs that diverged (``diverged``: ``{(rule, seed): round}``; they have no value nor
    curve) are left out of the means and the convergence check, and a difference is paired on
    the seeds where neither run diverged; the row names them (``diverged``: ``seed 2 at round
    354; 2 of 3 seeds``). A row with no seed left has no numbers and the verdict
    :data:`DIVERGED`."""
    rows = []
    diverged = diverged or {}
    paper_numbers = column.paper if metric == spec.metric else {}
    factor = shown_scale(metric)
    checked = {}
    for rule in rules:
        runs = None if curves is None else [
            [factor * v for v in curves[(rule, s)]] for s in spec.seeds if (rule, s) in curves]
        checked[rule] = convergence(runs, spec.tie) if runs else (None, None, None)
    base = {s: factor * values[(spec.baseline, s)] for s in spec.seeds
            if (spec.baseline, s) not in diverged}
    for rule in rules:
        mine = {s: factor * values[(rule, s)] for s in spec.seeds if (rule, s) not in diverged}
        mean, half = mean_ci(list(mine.values())) if mine else (math.nan, math.nan)
        paper = paper_numbers.get(rule)
        lost = [s for s in spec.seeds if (rule, s) in diverged]
        note = "; ".join(f"seed {s} at round {diverged[(rule, s)]}" for s in lost)
        note += f"; {len(mine)} of {len(spec.seeds)} seeds" if lost else ""
        converged, drift, limit = checked[rule]
        if rule == spec.baseline:
            rows.append(Row(column.name, metric, rule, paper, mean, half, len(mine), None, None,
                            None, converged, drift, limit, "baseline", "", seconds, note))
            continue
        reference = paper_numbers.get(spec.baseline)
        paper_diff = None if paper is None or reference is None else paper - reference
        if not set(mine) & set(base):
            rows.append(Row(column.name, metric, rule, paper, mean, half, len(mine), paper_diff,
                            None, None, converged, drift, limit, DIVERGED,
                            "no seed on which both runs finished", seconds, note))
            continue
        diff, diff_half, _ = paired_difference(mine, base)
        claim = column.claim.get(rule) if metric == spec.metric else None
        word, why = verdict(paper_diff, diff, diff_half, spec.tie, claim)
        unsettled = [(r, checked[r]) for r in (rule, spec.baseline) if checked[r][0] is False]
        if unsettled and word != "no paper number":
            word = NOT_CONVERGED
            why = "; ".join(f"{r} moves {d:.1f} over its last evaluations (limit {lim:.1f})"
                            for r, (_, d, lim) in unsettled) + f"; {why}"
        elif converged is None or checked[spec.baseline][0] is None:
            why = f"convergence unchecked (too few evaluations); {why}"
        rows.append(Row(column.name, metric, rule, paper, mean, half, len(mine), paper_diff, diff,
                        diff_half, converged, drift, limit, word, why, seconds, note))
    return rows


def _number(value: Optional[float], signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _interval(mean: Optional[float], half: Optional[float], signed: bool = False) -> str:
    if mean is None or not math.isfinite(mean):
        return ""
    text = _number(mean, signed)
    return text + (f" ± {half:.1f}" if half is not None and math.isfinite(half) else "")


def _detectable(half: Optional[float]) -> str:
    return "n/a" if half is None or not math.isfinite(half) else f"{half:.1f}"


def _converged(row: Row) -> str:
    if row.converged is None or row.drift is None or row.drift_limit is None:
        return "unchecked"
    return f"{'yes' if row.converged else 'no'} ({row.drift:.1f} / {row.drift_limit:.1f})"


def markdown(table: TableResult) -> str:
    """The table as Markdown: a heading naming the paper and its table, a line on the metric,
    seeds, setting, wall time, load and command, the rows, then what the setting reduces,
    what the paper leaves unstated and the notes."""
    spec = table.spec
    seeds = ", ".join(map(str, table.seeds))
    setting = "the paper's full setting (--full)" if table.full else \
        "the shipped reduced setting (below)"
    lines = [f"### {spec.title}", "",
             f"{spec.paper}, {spec.source}. Metric: {spec.metric_label} (`{spec.metric}`"
             + "".join(f"; beside it {label}, `{name}`" for name, label in spec.also.items())
             + "). "
             "Numbers in % (a variance in %²), the unit of the paper's table quoted beside "
             "ours; `fastfair simulate` and `sweep` print fractions in [0, 1]. "
             f"fastfair: mean ± half-width of the 95 % Student-t interval over seeds {seeds}; "
             f"gap: fastfair's level minus the paper's; "
             f"Δ: difference to {spec.baseline} (paper: of its numbers; ours: paired on "
             f"seeds); detectable: the smallest |Δ| these seeds could tell from 0 (the "
             f"half-width of the paired interval); converged: the metric's drift over the last "
             f"{CONVERGENCE_WINDOW:.0%} of the evaluations against the larger of its spread "
             f"across seeds and the tie (a rule that has not converged gets no verdict). "
             f"Verdict on Δ (fastfair.reproduce.run). Setting: {setting}. Wall time "
             f"{table.seconds:.0f} s on {_machine.summary(table.machine)} (load average "
             f"{table.load[0]:.1f} at the start, {table.load[1]:.1f} at the end). Command: "
             f"`{table.command}`.", "",
             "| column |" + (" metric |" if spec.also else "")
             + " rule | paper | fastfair | gap | paper Δ | fastfair Δ | detectable | converged "
             "(drift / limit) | verdict | why |",
             "|---|" + ("---|" if spec.also else "") + "---|---|---|---|---|---|---|---|---|---|"]
    if table.pending:
        lines[2:2] = [f"**Unfinished**: {', '.join(table.pending)} not run yet; "
                      "`fastfair reproduce --resume` on this folder finishes the table.", ""]
    for r in table.rows:
        metric = f" `{r.metric}` |" if spec.also else ""
        gap = None if r.paper is None else r.ours_mean - r.paper
        base = r.rule == spec.baseline
        lines.append(f"| {r.column} |{metric} {r.rule} | {_number(r.paper)} | "
                     f"{_interval(r.ours_mean, r.ours_half)} | "
                     f"{'' if gap is None else _number(gap, True)} | "
                     f"{'' if base else _number(r.paper_diff, True)} | "
                     f"{_interval(r.ours_diff, r.ours_diff_half, True)} | "
                     f"{'' if base else _detectable(r.ours_diff_half)} | "
                     f"{_converged(r)} | {r.verdict} | "
                     f"{r.why}{'; diverged: ' + r.diverged if r.diverged else ''} |")
    notes = [c for c in spec.columns if c.paper_note]
    if notes:
        lines += ["", "The paper's numbers: " + " ".join(f"{c.name}: {c.paper_note}"
                                                           for c in notes)]
    if not table.full and spec.reduced:
        lines += ["", f"Reduced: {spec.reduced}"]
    if spec.unstated:
        lines += ["", "Unstated in the paper, and what was chosen:", ""]
        lines += [f"- {item}" for item in spec.unstated]
    if spec.notes:
        lines += [""] + [f"- {item}" for item in spec.notes]
    return "\n".join(lines) + "\n"


def write_outputs(table: TableResult, out: Path) -> None:
    """``out/table.md`` (:func:`markdown`), ``out/table.csv`` (:data:`FIELDS` and the machine,
    one row per rule and column) and ``out/table.json`` (the rows with the table's name,
    paper, source, metric, seeds, setting, wall time, load, machine, command and the columns
    not run yet), each written whole (a stopped write leaves the previous file)."""
    with files.atomic(out / run_files.TABLE_MD, text=True) as f:
        f.write(markdown(table))
    machine = _machine.summary(table.machine)
    with files.atomic(out / run_files.TABLE_CSV, text=True) as f:
        writer = csv.DictWriter(f, fieldnames=(*FIELDS, "machine"))
        writer.writeheader()
        for row in table.rows:
            writer.writerow({**asdict(row), "machine": machine})
    spec = table.spec
    record: Dict[str, Any] = {
        "name": spec.name, "title": spec.title, "paper": spec.paper, "source": spec.source,
        "metric": spec.metric, "baseline": spec.baseline, "seeds": table.seeds,
        "full": table.full, "seconds": table.seconds, "load_average": list(table.load),
        "machine": table.machine, "command": table.command, "unfinished": table.pending,
        "rows": [_finite(asdict(r)) for r in table.rows]}
    with files.atomic(out / run_files.TABLE_JSON, text=True) as f:
        f.write(json.dumps(record, indent=1) + "\n")


def _finite(row: Dict[str, Any]) -> Dict[str, Any]:
    # JSON has no NaN: a one-seed interval is written as null.
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in row.items()}
