"""The names of the files a run folder holds, in one place: every writer and reader of a run
folder (``fastfair simulate``, ``fastfair sweep``, ``fastfair reproduce``, :func:`load_run`)
takes them from here. Plain data."""

from __future__ import annotations

#: An experiment's configuration (rules, their options, the flat settings).
EXPERIMENT_CONFIG = "config.json"
#: A sweep's configuration (rules, seeds, grid, the flat settings).
SWEEP_CONFIG = "sweep.json"
#: The state a stopped run resumes from.
CHECKPOINT = "checkpoint.pt"
#: Every run's final global model.
MODELS = "models.pt"
#: An experiment's round records, as a table and as JSON.
METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"
#: Each client's final accuracy per rule, its summary per rule, and their plots.
FINAL_ACCURACY_CSV = "final_accuracy.csv"
SUMMARY = "summary.json"
FAIRNESS_PNG = "fairness.png"
FINAL_ACCURACY_PNG = "final_accuracy.png"
#: A sweep's summaries, its runs, each run's final accuracies, and its plots.
SWEEP_SUMMARY_CSV = "sweep_summary.csv"
SWEEP_SUMMARY_JSON = "sweep_summary.json"
SWEEP_RUNS = "sweep_runs.csv"
SWEEP_FINALS = "sweep_final_accuracy.csv"
TRADEOFF_PNG = "tradeoff.png"
CURVES_PNG = "curves.png"
#: The round records of the CSV logger (``--log csv``).
ROUNDS_CSV = "rounds.csv"
#: A reproduced table, as Markdown, CSV and JSON, and the settings of its command.
TABLE_MD = "table.md"
TABLE_CSV = "table.csv"
TABLE_JSON = "table.json"
REPRODUCE_SETTINGS = "reproduce.json"


def participation(rule: str) -> str:
    """The file of each client's kept rounds under rule ``rule`` on a device population:
    ``participation_<rule>.csv``."""
    return f"participation_{rule}.csv"
