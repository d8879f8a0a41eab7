"""``fastfair`` command line. ``fastfair simulate`` runs federated simulations of any rule (or
several, side by side) and writes metrics, plots and checkpoints."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from fastfair.sim.engine import Distributed

DEFAULT_RULES = ("fedavg", "aaggff-d", "fedmaba")
CHECKPOINT = "checkpoint.pt"


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _rule_options(pairs: Sequence[str], rules: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """``KEY=VALUE`` (every rule) or ``RULE:KEY=VALUE`` (one rule) -> {rule: {key: value}}."""
    options: Dict[str, Dict[str, Any]] = {r: {} for r in rules}
    for pair in pairs:
        target, _, assignment = pair.rpartition(":") if ":" in pair.split("=", 1)[0] else ("", "", pair)
        key, sep, text = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"--rule-option expects KEY=VALUE or RULE:KEY=VALUE; got {pair!r}")
        if target and target not in options:
            raise ValueError(f"--rule-option {pair!r} names rule {target!r}, which is not run")
        for rule in ([target] if target else rules):
            options[rule][key] = _value(text)
    return options


def _parser() -> argparse.ArgumentParser:
    from fastfair.sim.engine import SimulationConfig
    from fastfair.sim.methods import METHODS
    from fastfair.sim.rules import RULES, SERVER_OPTIMIZERS

    d = SimulationConfig()
    parser = argparse.ArgumentParser(prog="fastfair", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "simulate", help="run a federated simulation",
        description="Runs federated rounds of one or several aggregation rules on identical data, "
                    "client samples and seeds, and writes metrics (CSV, JSON), the config and PNG "
                    "plots into --out. With no options: " + ", ".join(DEFAULT_RULES) +
                    " on Synthetic(1, 1).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("rules")
    g.add_argument("--rule", choices=sorted(RULES) + list(METHODS), help="run one rule")
    g.add_argument("--compare", metavar="R1,R2,...",
                   help=f"run several rules side by side (default {','.join(DEFAULT_RULES)})")
    g.add_argument("--rule-option", action="append", default=[], metavar="[RULE:]KEY=VALUE",
                   help="a rule hyperparameter, e.g. cdf=weibull or fedmaba:alpha=0.5 (repeatable)")
    g = p.add_argument_group("population and data")
    g.add_argument("--clients", type=int, default=d.clients, help="K, the client population")
    g.add_argument("--per-round", type=int, default=d.per_round, help="m, clients per round")
    g.add_argument("--rounds", type=int, default=d.rounds)
    g.add_argument("--dataset", choices=["synthetic", "digits"],
                   help=f"default {d.dataset}; digits for " + ", ".join(METHODS))
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--synthetic-alpha", type=float, default=d.synthetic_alpha)
    g.add_argument("--synthetic-beta", type=float, default=d.synthetic_beta)
    g.add_argument("--max-samples", type=int, default=d.max_samples,
                   help="cap on a synthetic client's samples")
    g.add_argument("--partition", choices=["iid", "dirichlet", "pathological"], default=d.partition,
                   help="how digits are split across clients")
    g.add_argument("--dirichlet-alpha", type=float, default=d.dirichlet_alpha)
    g.add_argument("--classes-per-client", type=int, default=d.classes_per_client)
    g.add_argument("--availability", choices=["uniform", "bernoulli", "ram"], default=d.availability)
    g.add_argument("--availability-option", action="append", default=[], metavar="KEY=VALUE")
    g = p.add_argument_group("model and training")
    g.add_argument("--model", choices=["logreg", "mlp"], default=d.model)
    g.add_argument("--hidden", type=int, default=d.hidden, help="MLP hidden width")
    g.add_argument("--epochs", type=int, default=d.epochs, help="local epochs E")
    g.add_argument("--local-steps", type=int, default=d.local_steps,
                   help="H local minibatch steps (overrides --epochs)")
    g.add_argument("--batch-size", type=int, default=d.batch_size)
    g.add_argument("--lr", type=float, default=d.lr, help="client learning rate")
    g.add_argument("--lr-decay", type=float, default=d.lr_decay, help="per-round lr factor")
    g.add_argument("--server-lr", type=float, default=d.server_lr)
    g.add_argument("--server-optimizer", choices=sorted(SERVER_OPTIMIZERS),
                   default=d.server_optimizer)
    g.add_argument("--server-option", action="append", default=[], metavar="KEY=VALUE")
    g = p.add_argument_group("evaluation and output")
    g.add_argument("--eval-every", type=int, default=d.eval_every)
    g.add_argument("--eval-clients", type=int, default=d.eval_clients,
                   help="clients evaluated (a fixed random subset when K is larger)")
    g.add_argument("--out", type=Path, help="output folder (default: a fresh folder)")
    g.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save a checkpoint every N rounds (0: never)")
    g.add_argument("--resume", type=Path, metavar="DIR", help="continue the run saved in DIR")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _options(pairs: Sequence[str], flag: str) -> Dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} expects KEY=VALUE; got {pair!r}")
        out[key] = _value(text)
    return out


def _fresh_folder() -> Path:
    base = Path("fastfair-runs") / time.strftime("simulate-%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _save_checkpoint(out: Path, payload: Dict[str, Any]) -> None:
    import torch

    tmp = out / (CHECKPOINT + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, out / CHECKPOINT)  # a kill mid-write never leaves a torn checkpoint


def simulate(args: argparse.Namespace) -> int:
    from fastfair.sim.engine import Distributed

    dist = Distributed.from_environment()
    try:
        return _simulate(args, dist)
    finally:
        dist.close()


def _simulate(args: argparse.Namespace, dist: Distributed) -> int:
    import torch
    from tqdm import tqdm

    from fastfair.sim import report
    from fastfair.sim.engine import SimulationConfig
    from fastfair.sim.methods import METHODS, check_options, make_simulation
    from fastfair.sim.rules import build_rule

    lead = dist.rank == 0
    if args.resume is not None:
        out = args.resume
        saved = json.loads((out / "config.json").read_text())
        rules: List[str] = saved["rules"]
        base = SimulationConfig.from_dict(saved["config"])
        options = saved["rule_options"]
        checkpoint_every = saved["checkpoint_every"]
        path = out / CHECKPOINT
        state = torch.load(path, weights_only=False) if path.exists() else None
    else:
        if args.rule and args.compare:
            raise ValueError("pass --rule or --compare, not both")
        rules = [args.rule] if args.rule else list(report.parse_rules(args.compare or
                                                                      ",".join(DEFAULT_RULES)))
        dataset = args.dataset or ("digits" if set(rules) & set(METHODS)
                                   else SimulationConfig().dataset)
        base = SimulationConfig(
            dataset=dataset, clients=args.clients, per_round=args.per_round,
            rounds=args.rounds, seed=args.seed, synthetic_alpha=args.synthetic_alpha,
            synthetic_beta=args.synthetic_beta, max_samples=args.max_samples,
            partition=args.partition, dirichlet_alpha=args.dirichlet_alpha,
            classes_per_client=args.classes_per_client, model=args.model, hidden=args.hidden,
            epochs=args.epochs, local_steps=args.local_steps, batch_size=args.batch_size,
            lr=args.lr, lr_decay=args.lr_decay, server_lr=args.server_lr,
            server_optimizer=args.server_optimizer,
            server_options=_options(args.server_option, "--server-option"),
            availability=args.availability,
            availability_options=_options(args.availability_option, "--availability-option"),
            eval_every=args.eval_every, eval_clients=args.eval_clients)
        options = _rule_options(args.rule_option, rules)
        for rule in rules:  # every rule name and option is checked before anything is written
            if rule in METHODS:
                check_options(rule, options[rule])
            else:
                build_rule(rule, base.clients, options[rule], per_round=base.per_round)
        checkpoint_every = args.checkpoint_every
        out = args.out or _fresh_folder()
        state = None
        if lead:
            if out.exists() and any(out.iterdir()):
                raise ValueError(f"--out {out} is not empty; pick a new folder or --resume it")
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text(json.dumps(
                {"rules": rules, "config": base.to_dict(), "rule_options": options,
                 "checkpoint_every": checkpoint_every}, indent=1))
    if lead:
        print(f"fastfair simulate: {', '.join(rules)} | K={base.clients} m={base.per_round} "
              f"rounds={base.rounds} dataset={base.dataset} | writing to {out}", flush=True)

    histories: Dict[str, List[dict]] = dict(state["histories"]) if state else {}
    finals: Dict[str, np.ndarray] = dict(state["finals"]) if state else {}
    seconds: Dict[str, float] = dict(state["seconds"]) if state else {}
    eval_ids = None
    for rule in rules:
        config = dataclasses.replace(base, rule=rule, rule_options=options[rule])
        sim = make_simulation(config, dist)
        eval_ids = sim.eval_ids
        if rule in finals:
            continue
        if state and state.get("current_rule") == rule:
            sim.load_state_dict(state["current"])
        started = time.perf_counter() - seconds.get(rule, 0.0)
        bar = tqdm(total=config.rounds, initial=sim.round, desc=f"{rule:>10}", unit="round",
                   disable=args.quiet or not lead, dynamic_ncols=True, file=sys.stderr)
        while sim.round < config.rounds:
            rec = sim.step()
            bar.update(1)
            if "acc_mean" in rec:
                bar.set_postfix(mean=f"{100 * rec['acc_mean']:.1f}%",
                                worst10=f"{100 * rec['acc_worst10']:.1f}%")
            seconds[rule] = time.perf_counter() - started
            if lead and checkpoint_every and sim.round % checkpoint_every == 0:
                _save_checkpoint(out, {"histories": histories, "finals": finals,
                                       "seconds": seconds, "current_rule": rule,
                                       "current": sim.state_dict()})
        bar.close()
        histories[rule] = sim.history
        finals[rule] = sim.evaluate()[0]
        seconds[rule] = time.perf_counter() - started
        if lead and checkpoint_every:
            _save_checkpoint(out, {"histories": histories, "finals": finals, "seconds": seconds,
                                   "current_rule": None, "current": None})
    if not lead:
        return 0
    report.write_metrics(out, histories)
    report.write_final_accuracy(out, finals, eval_ids)
    title = (f"{base.dataset}, K={base.clients}, m={base.per_round}, {base.model}, "
             f"seed {base.seed}")
    plots = report.plot(out, histories, finals, title)
    summary = report.summarize(histories, seconds)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(report.summary_table(summary))
    print(f"wrote {out}/metrics.csv, metrics.json, summary.json, final_accuracy.csv, "
          + ", ".join(p.name for p in plots))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``fastfair`` console script and ``python -m fastfair``."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "simulate":
            return simulate(args)
    except ValueError as exc:
        print(f"fastfair {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 1
