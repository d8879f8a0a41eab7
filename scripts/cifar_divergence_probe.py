"""Does FedMABA's CIFAR-10 setting diverge with fastfair's ``cifar-cnn`` on [0, 1] pixels, and
with the FedMABA authors' framework's CNN on standardised pixels (``flgo-cifar-cnn``)?

The setting of ``fastfair/reproduce/tables/fedmaba-table2-cifar10.toml``: CIFAR-10 (the JPEG
copy) over 100 clients by Dirichlet(0.5) labels, 10 clients a round, 10 local SGD steps of batch
50 at lr 0.1 decaying by 0.999 a round; FedMABA with alpha 0.5, eta_b 0.5, rho 1. Each run is
one ``python3 -m fastfair simulate`` process (all of them at once, on one device), streaming
its rounds to ``rounds.csv`` (its output beside it, ``NAME.log``); the script stops whatever
still runs at ``--timeout`` seconds and prints, per run and per block of ``--every`` rounds,
the mean and largest training loss (of the received model on the round's clients), the mean
client accuracy at the block's end, and then whether the run diverged (a non-finite loss; the
round named) or how far it got.

Run (the data: the JPEG tarball, a folder holding it, or a folder of ``train/<class>/*.jpg``,
``test/<class>/*.jpg``)::

    python3 scripts/cifar_divergence_probe.py DATA --device cuda --rounds 450 --timeout 170

``--runs`` picks the runs, ``RULE:SEED:MODEL`` comma separated (default: FedAvg seed 2 and
FedMABA seed 0, each with ``cifar-cnn`` and ``flgo-cifar-cnn``).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SETTING = ["--dataset", "image-folder", "--partition", "dirichlet", "--dirichlet-alpha", "0.5",
           "--clients", "100", "--per-round", "10", "--local-steps", "10", "--batch-size",
           "50", "--lr", "0.1", "--lr-decay", "0.999", "--train-loss", "--log", "csv"]
#: The table's FedMABA options (alpha, eta_b, rho).
OPTIONS = {"fedmaba": ["--rule-option", "alpha=0.5", "--rule-option", "step_size=0.5",
                       "--rule-option", "rho=1.0"]}
ROOT = Path(__file__).resolve().parents[1]
RUNS = "fedavg:2:cifar-cnn,fedavg:2:flgo-cifar-cnn,fedmaba:0:cifar-cnn,fedmaba:0:flgo-cifar-cnn"


def image_folder(data: Path, scratch: Path) -> Path:
    """The folder holding ``train/`` and ``test/`` class folders: ``data`` itself, a folder
    below it, or the extraction into ``scratch`` of the ``*.tar.gz`` that ``data`` is or
    holds."""
    if data.is_dir():
        for root in [data] + sorted(p for p in data.rglob("*") if p.is_dir()):
            if (root / "train").is_dir() and (root / "test").is_dir():
                return root
        tars = sorted(data.glob("*.tar.gz"))
        if not tars:
            raise SystemExit(f"data {data}: no train/ and test/ folders and no .tar.gz in it")
        data = tars[0]
    with tarfile.open(data) as tar:
        tar.extractall(scratch)
    return image_folder(scratch, scratch)


def read_rounds(path: Path) -> List[Dict[str, str]]:
    """A run's ``rounds.csv`` (long rows ``run, round, metric, value``) as one dict of metric
    -> value per round, in round order (none when it was not written yet)."""
    if not path.exists():
        return []
    rounds: Dict[int, Dict[str, str]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rounds.setdefault(int(row["round"]), {"round": row["round"]})[row["metric"]] = \
                row["value"]
    return [rounds[t] for t in sorted(rounds)]


def number(text: Optional[str]) -> float:
    """A CSV cell as a float: NaN when empty or missing."""
    return float(text) if text not in (None, "") else math.nan


def summary(name: str, rows: List[Dict[str, str]], log: str, every: int, rounds: int,
            code: Optional[int]) -> Tuple[List[str], str]:
    """Per block of ``every`` rounds, a line ``round, mean and max train loss, mean accuracy``,
    and the run's verdict: ``DIVERGED at round R``, ``ok, R rounds`` or ``stopped at round
    R``. A round is diverged where its training loss is not finite or it records a
    ``diverged`` metric; a run the engine stopped with "training diverged" diverged in the round
    after its last one."""
    lines, losses, first_bad = [], [], None
    for row in rows:
        t, loss = int(row["round"]), number(row.get("train_loss"))
        losses.append(loss)
        if first_bad is None and (not math.isfinite(loss) or "diverged" in row):
            first_bad = t
        if t % every == 0:
            block = losses[-every:]
            finite = [v for v in block if math.isfinite(v)]
            mean = sum(finite) / len(finite) if finite else math.nan
            lines.append(f"  {name:30s} round {t:5d}  train loss mean {mean:8.4f} max "
                         f"{max(finite, default=math.nan):9.4f}  acc_mean "
                         f"{number(row.get('acc_mean')):.4f}")
    last = int(rows[-1]["round"]) if rows else 0
    if first_bad is None and "training diverged" in log:
        first_bad = last + 1  # the engine refused the round whose received loss was not finite
    if first_bad is not None:
        verdict = f"DIVERGED at round {first_bad}"
    elif code == 0 and last >= rounds:
        verdict = f"ok, {last} rounds, no divergence"
    else:
        verdict = f"stopped at round {last} (exit {code}), no divergence so far"
    return lines, verdict


def main() -> None:
    """Runs ``--runs`` at FedMABA's CIFAR-10 setting in parallel and prints their trajectories
    and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the JPEG tarball, or a folder with it or with "
                        "train/ and test/ class folders")
    parser.add_argument("--runs", default=RUNS, help="RULE:SEED:MODEL,... (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=450)
    parser.add_argument("--every", type=int, default=50, help="rounds per printed block and "
                        "between evaluations")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timeout", type=float, default=170.0,
                        help="seconds until every run still going is stopped")
    parser.add_argument("--out", type=Path, default=None, help="the runs' folders (default: a "
                        "temporary folder)")
    args = parser.parse_args()
    start = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="cifar_probe_"))
    out = args.out or scratch / "runs"
    folder = image_folder(args.data, scratch / "data")
    # fastfair from this checkout; the images decoded once into its cache, so that the runs
    # memory-map one copy.
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + os.environ.get("PYTHONPATH", "").split(
                   os.pathsep)).rstrip(os.pathsep))
    subprocess.run([sys.executable, "-c", "import sys; from fastfair.sim.data.image_folder "
                    "import load_image_folder; load_image_folder(sys.argv[1])", str(folder)],
                   env=env, check=True)
    print(f"data {folder} ready in {time.monotonic() - start:.0f} s", flush=True)
    procs = {}
    for spec in args.runs.split(","):
        rule, seed, model = spec.split(":")
        name = f"{rule} seed {seed} {model}"
        run_dir = out / f"{rule}-s{seed}-{model}"
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "fastfair", "simulate", "--rule", rule, "--seed", seed,
               "--model", model, "--data-dir", str(folder), "--rounds", str(args.rounds),
               "--eval-every", str(args.every), "--device", args.device, "--out",
               str(run_dir), "--quiet"] + SETTING + OPTIONS.get(rule, [])
        log = open(run_dir.with_suffix(".log"), "w")
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env),
                       run_dir, log)
    while any(p.poll() is None for p, _, _ in procs.values()) \
            and time.monotonic() - start < args.timeout:
        time.sleep(1.0)
    for proc, _, log in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
    print(f"after {time.monotonic() - start:.0f} s:")
    verdicts = []
    for name, (proc, run_dir, _) in procs.items():
        text = run_dir.with_suffix(".log").read_text(errors="replace")
        lines, verdict = summary(name, read_rounds(run_dir / "rounds.csv"), text, args.every,
                                 args.rounds, proc.returncode)
        print("\n".join(lines))
        if proc.returncode not in (0, None) and "training diverged" not in text:
            print("  " + "\n  ".join(text.strip().splitlines()[-5:]))
        verdicts.append(f"{name:30s} {verdict}")
    print("verdicts:\n" + "\n".join(verdicts))


if __name__ == "__main__":
    main()
