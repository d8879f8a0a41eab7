"""Per-round hooks of an experiment: a :class:`RoundCallback` sees every run start, every round
record and every run's summary as they happen, so metrics can stream to CSV, TensorBoard, Weights &
Biases or Python ``logging`` while the run goes on (the files of
:mod:`fastfair.sim.reporting.report` are written only at the end).

.. code-block:: python

    from fastfair.sim import Experiment, SimulationConfig
    from fastfair.sim.reporting.callbacks import CSVLogger, TensorBoardLogger

    Experiment(SimulationConfig(rounds=50), ["fedavg", "aaggff-d"],
               callbacks=[CSVLogger("runs/x.csv"), TensorBoardLogger("runs/tb")]).run()

A *run* is named by a string: a rule name in :class:`~fastfair.sim.Experiment`, other names
(``"term(tilt=1)/seed1"``) elsewhere, so callbacks treat it as an opaque label.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import numbers
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from fastfair._files import write_error
from fastfair._options import check_name
from fastfair.sim import run_files

#: The logger of per-round messages; only the command line attaches handlers to it.
LOGGER = logging.getLogger("fastfair.sim")
#: The names :func:`build_callbacks` (``fastfair simulate --log``) knows.
CALLBACK_NAMES = ("csv", "tensorboard", "wandb")


class RoundCallback:
    """The hooks an experiment calls, in this order for each run: :meth:`on_run_start`, then
    :meth:`on_round` after every round, then :meth:`on_run_end`; :meth:`close` once at the end
    (also when a round raised). Every method does nothing here; override the ones you need."""

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        """Before the run's first round (of this process: a resumed run starts at its next
        round); ``config`` is its configuration as a plain dict."""

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        """After each round, with its record (``"round"``, ``"participants"``, ``"train_loss"``,
        ...; evaluation rounds add ``"acc_mean"``, ``"acc_worst10"``, ..., ``"test_loss"``)."""

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        """After the run's last round, with its summary row (the last evaluation's metrics,
        ``"acc_mean_acf1"``, ``"seconds"``)."""

    def close(self) -> None:
        """Releases files and connections; a later :meth:`on_run_start` may open them again."""


class CallbackList(RoundCallback):
    """Several callbacks as one, called in the order given; :meth:`close` closes every one of
    them even when one raises."""

    def __init__(self, callbacks: Sequence[RoundCallback] = ()) -> None:
        self.callbacks = list(callbacks)

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_run_start(run, config)

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_round(run, record)

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        for cb in self.callbacks:
            cb.on_run_end(run, summary)

    def close(self) -> None:
        with contextlib.ExitStack() as stack:
            for cb in reversed(self.callbacks):
                stack.callback(cb.close)


def scalars(record: Dict[str, Any]) -> Iterator[Tuple[str, float]]:
    """``(metric, value)`` for each real-number entry of ``record`` other than ``"round"``
    (booleans, strings and sequences are left out)."""
    for key, value in record.items():
        if key != "round" and isinstance(value, numbers.Real) and not isinstance(value, bool):
            yield key, float(value)


class CSVLogger(RoundCallback):
    """Streams the rounds to the CSV file ``path`` in long format, one row per round and metric:
    ``run,round,metric,value`` (so records with different keys share one header). The file is
    opened at the first run's start, appended to when it exists (a resumed run adds its new
    rounds; rounds after its last checkpoint then appear twice, the later row being the replay),
    and flushed after every round, so a crashed run leaves what it logged. A write that fails
    (a full disk) raises :class:`~fastfair._files.FileWriteError` ("no space left on
    device while writing PATH") and closes the file."""

    COLUMNS = ("run", "round", "metric", "value")

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)
        self._file: Any = None
        self._writer: Any = None

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        if self._file is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", newline="")
                self._writer = csv.writer(self._file)
                if self._file.tell() == 0:
                    self._writer.writerow(self.COLUMNS)
            except OSError as exc:
                self._failed()
                raise write_error(exc, self.path) from None

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        t = record["round"]
        try:
            self._writer.writerows((run, t, k, v) for k, v in record.items() if k != "round")
            self._file.flush()
        except OSError as exc:
            self._failed()
            raise write_error(exc, self.path) from None

    def _failed(self) -> None:
        """Closes the file after a failed write, dropping what it could not write (closing
        would only fail again)."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._file = self._writer = None

    def close(self) -> None:
        if self._file is not None:
            file, self._file, self._writer = self._file, None, None
            try:
                file.close()
            except OSError as exc:
                raise write_error(exc, self.path) from None


def folder_name(run: str) -> str:
    """A folder name for ``run``: characters other than letters, digits and ``._=,()+-`` become
    ``_`` (``"term(tilt=1)/seed1"`` -> ``"term(tilt=1)_seed1"``); never empty, ``.`` or ``..``."""
    return re.sub(r"[^\w.=,()+-]", "_", run, flags=re.ASCII).strip(".") or "run"


class TensorBoardLogger(RoundCallback):
    """Writes every numeric entry of every round as a TensorBoard scalar (``metric`` at step
    ``round``), one event folder per run under ``log_dir`` (:func:`folder_name` of the run's
    name; ``-2``, ``-3``, ... when two names map to the same folder), plus the run's config as
    text. View with ``tensorboard --logdir LOG_DIR``. Needs the ``tensorboard`` package (the
    ``sim`` extra)."""

    def __init__(self, log_dir: Union[str, Path]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError("TensorBoardLogger needs the tensorboard package: pip install "
                              "'fastfair[sim]' (or pip install tensorboard)") from exc
        self._summary_writer = SummaryWriter
        self.log_dir = Path(log_dir)
        self._folders: Dict[str, str] = {}
        self._writers: Dict[str, Any] = {}

    def _folder(self, run: str) -> str:
        if run not in self._folders:
            name, n, taken = folder_name(run), 1, set(self._folders.values())
            folder = name
            while folder in taken:
                n += 1
                folder = f"{name}-{n}"
            self._folders[run] = folder
        return self._folders[run]

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        writer = self._summary_writer(log_dir=str(self.log_dir / self._folder(run)))
        self._writers[run] = writer
        # Indented: TensorBoard renders text as Markdown, where indentation keeps the JSON as is.
        text = json.dumps(config, indent=1, default=str)
        writer.add_text("config", "    " + text.replace("\n", "\n    "))

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        writer = self._writers[run]
        for key, value in scalars(record):
            writer.add_scalar(key, value, global_step=record["round"])
        writer.flush()

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        self._writers.pop(run).close()

    def close(self) -> None:
        while self._writers:
            self._writers.popitem()[1].close()


class WandbLogger(RoundCallback):
    """Logs to Weights & Biases: one W&B run per run (``wandb.init(project=project, name=run,
    config=config, **init_kwargs)``, finishing a previous one), the numeric entries of each round
    at ``step=round``, the summary row into the run's summary, and ``finish()`` at the run's
    end. Needs the ``wandb`` package (0.19.10 or later) and its login."""

    def __init__(self, project: Optional[str] = None, **init_kwargs: Any) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError("WandbLogger needs the wandb package: pip install wandb") from exc
        self._wandb = wandb
        self.project = project
        self.init_kwargs = init_kwargs
        self._run: Any = None

    def on_run_start(self, run: str, config: Dict[str, Any]) -> None:
        self._run = self._wandb.init(**{"reinit": "finish_previous", **self.init_kwargs,
                                        "project": self.project, "name": run, "config": config})

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        self._run.log(dict(scalars(record)), step=record["round"])

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        self._run.summary.update(summary)
        self.close()

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


class LoggingCallback(RoundCallback):
    """One line per evaluation round (mean and worst-10% accuracy, test loss) and one per run's
    end, at ``level`` through the ``fastfair.sim`` logger, which shows them only where its
    handlers let that level through (``fastfair simulate --log-level``)."""

    def __init__(self, level: int = logging.INFO) -> None:
        self.level = level

    def on_round(self, run: str, record: Dict[str, Any]) -> None:
        if "acc_mean" in record:
            LOGGER.log(self.level, "%s round %d: mean acc %.4f, worst 10%% %.4f, test loss "
                       "%.4g", run, record["round"], record["acc_mean"],
                       record["acc_worst10"], record["test_loss"])

    def on_run_end(self, run: str, summary: Dict[str, float]) -> None:
        LOGGER.log(self.level, "%s done in %.1f s", run, summary.get("seconds", float("nan")))


def build_callbacks(names: Sequence[str], out: Union[str, Path]) -> List[RoundCallback]:
    """The loggers ``names`` (from :data:`CALLBACK_NAMES`) writing into the folder ``out``:
    ``csv`` -> ``out/rounds.csv``, ``tensorboard`` -> ``out/tensorboard/<run>/``, ``wandb`` -> a
    :class:`WandbLogger` of project ``fastfair`` keeping its local files in ``out``. Nothing is
    written before the first run starts. Raises ValueError for an unknown or repeated name
    (suggesting the closest) and for a logger whose package is not installed."""
    out = Path(out)
    for name in names:
        check_name("logger", name, CALLBACK_NAMES)
    if len(set(names)) != len(names):
        raise ValueError(f"names lists a logger twice: {', '.join(names)}")
    makers = {"csv": lambda: CSVLogger(out / run_files.ROUNDS_CSV),
              "tensorboard": lambda: TensorBoardLogger(out / "tensorboard"),
              "wandb": lambda: WandbLogger(project="fastfair", dir=str(out))}
    made = []
    for name in names:
        try:
            made.append(makers[name]())
        except ImportError as exc:
            raise ValueError(f"logger {name!r}: {exc}") from None
    return made
