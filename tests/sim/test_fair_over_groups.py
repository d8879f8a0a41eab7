"""Fairness over groups in the simulator: groups in the data (the grouped workload,
ArrayDataset(groups=), npz-clients' group entries, a client,group CSV, dominant classes), runs
with ``fair_over="groups"`` and both priors, their checkpoints, the per-group metrics and the
refusals."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from fastfair.cli import main
from fastfair.sim import Experiment, Simulation, SimulationConfig, Sweep
from fastfair.sim.data.arrays import ArrayDataset, digits_dataset
from fastfair.sim.data.base import dominant_classes, read_groups_file
from fastfair.sim.data.catalog import build_dataset
from fastfair.sim.data.npz import NpzClients
from tests.helpers.sim_files import write_npz_clients

GROUPED = SimulationConfig(dataset="grouped", clients=20_000, per_round=200, rounds=6,
                           eval_every=3, eval_clients=300, groups=4, lr=0.5)


def _history(config, rule="fedavg", **options):
    sim = Simulation(dataclasses.replace(config, rule=rule, rule_options=options))
    return [sim.step() for _ in range(config.rounds)], sim


def _same_run(a, b):
    """Equal round records, but wall times and the group weights a rule over groups adds."""
    def kept(record):
        return {k: v for k, v in record.items()
                if k != "seconds" and not k.startswith("group_weight_")}

    for x, y in zip(a, b):
        assert kept(x) == kept(y)


def test_fedavg_over_groups_with_the_size_prior_is_fedavg_bit_for_bit():
    per_client, _ = _history(GROUPED)
    size, sim = _history(dataclasses.replace(GROUPED, fair_over="groups", group_prior="size"))
    assert sim.rule.name == "over-groups" and sim.rule.num_groups == 4
    _same_run(per_client, size)
    uniform, _ = _history(dataclasses.replace(GROUPED, fair_over="groups"))
    assert uniform[-1]["acc_mean"] != per_client[-1]["acc_mean"]


def test_group_metrics_are_recorded_and_a_rule_over_groups_resumes_exactly():
    config = dataclasses.replace(GROUPED, fair_over="groups", rule="aaggff-d",
                                 rule_options={"step_scale": 5.0})
    whole = Simulation(config)
    records = [whole.step() for _ in range(config.rounds)]
    last = records[-1]
    accs = [last[f"acc_group{g}"] for g in range(4)]
    assert last["acc_worst_group"] == min(accs)
    assert 0 <= last["acc_gini_groups"] < 1
    half = Simulation(config)
    for _ in range(3):
        half.step()
    state = half.state_dict()
    resumed = Simulation(config)
    resumed.load_state_dict(state)
    _same_run(records[3:], [resumed.step() for _ in range(3)])
    assert resumed.rule.last_group_weights.sum() == pytest.approx(1.0)
    assert 0 < last["group_weight_min"] <= 0.25 <= last["group_weight_max"] < 1


def test_sweeps_pair_group_metrics_and_experiments_take_fair_over(tmp_path):
    result = Sweep(dataclasses.replace(GROUPED, rounds=3), ["fedavg", "afl"], seeds=[0, 1],
                   baseline="fedavg", fair_over="groups", group_prior="size").run()
    assert {"acc_worst_group", "acc_gini_groups"} <= set(result.metrics)
    afl = next(r for r in result.rows if r.rule == "afl")
    assert "acc_worst_group" in afl.differences and "acc_gini_groups" in afl.differences
    assert "grp Gini" in result.table()
    exp = Experiment(dataclasses.replace(GROUPED, rounds=3), rules=["fedavg"], fair_over="groups",
                     out=tmp_path / "run").run()
    assert exp.summary["fedavg"]["acc_gini_groups"] >= 0
    assert "worst grp" in exp.table() and "grp Gini" in exp.table()


@pytest.mark.parametrize("change, match", [
    ({"dataset": "synthetic"}, "the data set of this run has none"),
    ({"dataset": "digits"}, "--group-by-class"),
    ({"group_prior": "size"}, "group_prior = 'size' has no effect"),
    ({"dataset": "grouped", "fair_over": "groups", "rule": "fedcvar"}, "no group form"),
    ({"dataset": "grouped", "fair_over": "groups", "rule": "fedmgda", "group_prior": "size"},
     "takes prior='uniform' only"),
    ({"dataset": "grouped", "fair_over": "groups", "rule": "fedevg"}, "does not use fair_over"),
    ({"dataset": "digits", "group_by_class": True, "groups_file": "x.csv"}, "choose one"),
    ({"dataset": "grouped", "group_by_class": True}, "group_by_class = True has no effect"),
])
def test_runs_without_groups_or_a_group_form_are_refused_before_they_start(change, match):
    fair = {"fair_over": "groups"} if "fair_over" not in change and "group_prior" not in change \
        and "group_by_class" not in change else {}
    with pytest.raises(ValueError, match=match):
        Experiment(dataclasses.replace(SimulationConfig(rounds=1), **{**fair, **change})).run()


def test_array_datasets_carry_groups_and_runs_are_fair_over_them():
    rng = np.random.default_rng(0)
    train = [(rng.normal(size=(20, 5)).astype(np.float32), rng.integers(0, 3, 20))
             for _ in range(12)]
    groups = np.arange(12) % 3
    data = ArrayDataset(train, groups=groups)
    assert data.num_groups == 3 and list(data.groups([4, 5])) == [1, 2]
    result = Experiment(SimulationConfig(per_round=6, rounds=4, eval_every=2, fair_over="groups"),
                        rules=["fedavg", "aaggff-d"], dataset=data).run()
    assert "acc_gini_groups" in result.summary["aaggff-d"]
    with pytest.raises(ValueError, match="one group per client"):
        ArrayDataset(train, groups=[0, 1])
    with pytest.raises(ValueError, match="client 1 has group -1"):
        ArrayDataset(train, groups=[0, -1] + [0] * 10)


def test_npz_clients_take_a_group_entry(tmp_path):
    rng = np.random.default_rng(1)
    write_npz_clients(tmp_path / "a", rng, [10, 12, 9, 11])
    for k, path in enumerate(sorted((tmp_path / "a").glob("*.npz"))):
        arrays = dict(np.load(path))
        np.savez(path, **arrays, group=np.int64(k % 2))
    data = NpzClients(str(tmp_path / "a"))
    assert data.num_groups == 2 and list(data.group_ids) == [0, 1, 0, 1]
    config = SimulationConfig(dataset="npz-clients", data_dir=str(tmp_path / "a"), clients=4,
                              per_round=4, rounds=2, eval_every=1, fair_over="groups")
    assert "acc_worst_group" in Simulation(config).step()
    write_npz_clients(tmp_path / "b", rng, [10, 12])
    path = sorted((tmp_path / "b").glob("*.npz"))[1]
    np.savez(path, **dict(np.load(path)), group=np.int64(1))
    with pytest.raises(ValueError, match="give every client a group, or none"):
        NpzClients(str(tmp_path / "b"))
    np.savez(path, **{k: v for k, v in np.load(path).items() if k != "group"},
             group=np.array([1.5]))
    with pytest.raises(ValueError, match="group must be one integer"):
        NpzClients(str(tmp_path / "b"))


def test_a_groups_file_and_dominant_classes(tmp_path):
    data = digits_dataset(10, seed=0, alpha=0.3)  # as SimulationConfig splits digits
    csv = tmp_path / "groups.csv"
    csv.write_text("client,group\n" + "".join(f"{k},{'east' if k < 4 else 'west'}\n"
                                              for k in range(10)))
    assert list(read_groups_file(str(csv), data)) == [0] * 4 + [1] * 6
    csv.write_text("".join(f"{k},{k % 3}\n" for k in range(9)))
    with pytest.raises(ValueError, match="1 client\\(s\\) have no group, e.g. 9"):
        read_groups_file(str(csv), data)
    csv.write_text("0,1\n0,2\n")
    with pytest.raises(ValueError, match="line 2: client '0' has a second group"):
        read_groups_file(str(csv), data)
    csv.write_text("".join(f"{k},{k % 3}\n" for k in range(10)))
    config = SimulationConfig(dataset="digits", clients=10, per_round=5, rounds=2, eval_every=1,
                              groups_file=str(csv), fair_over="groups", group_prior="size")
    built = build_dataset(config)
    assert list(built.group_ids) == [k % 3 for k in range(10)]
    assert "acc_group2" in Simulation(config).step()
    by_class = build_dataset(dataclasses.replace(config, groups_file=None, group_by_class=True))
    expected = [np.bincount(data.client_data([k]).y.numpy()).argmax() for k in range(10)]
    np.testing.assert_array_equal(by_class.group_ids, expected)
    np.testing.assert_array_equal(dominant_classes(data, chunk=3), expected)


@pytest.mark.parametrize("labels, expected", [
    (["0", "1", "2", "3", "-1"], None),  # a negative group is refused, not renumbered
    (["07", "7", "+1", "1", "03"], [7, 7, 1, 1, 3]),
    (["3", "0", "2", "1", "0"], [3, 0, 2, 1, 0]),
    (["north", "south", "north", "east", "south"], [1, 2, 1, 0, 2]),
], ids=["negative", "signs-and-zeros", "integers", "names"])
def test_integer_groups_are_kept_as_integers(tmp_path, labels, expected):
    data = digits_dataset(5, seed=0, alpha=0.3)
    csv = tmp_path / "groups.csv"
    csv.write_text("client,group\n" + "".join(f"{k},{g}\n" for k, g in enumerate(labels)))
    if expected is None:
        with pytest.raises(ValueError, match=rf"{csv}: line 6: group -1 is outside \[0, "):
            read_groups_file(str(csv), data)
    else:
        assert list(read_groups_file(str(csv), data)) == expected


@pytest.mark.parametrize("labels, line, why", [
    (["1", "2", "1.5"], 4, "group '1.5' is neither an integer nor a name"),
    (["1", "", "2"], 3, "group '' is neither an integer nor a name"),
    (["1e3", "2", "2"], 2, "group '1e3' is neither an integer nor a name"),
    (["1", "north", "2"], 3, "group 'north' is a name, but line 2 gives '1'"),
    (["north", "2", "south"], 3, "group '2' is an integer, but line 2 gives 'north'"),
    (["1", "99999999999999999999", "2"], 3, "group 99999999999999999999 is outside"),
], ids=["decimal", "empty", "exponent", "name-after-integer", "integer-after-name", "huge"])
def test_a_group_that_is_neither_an_integer_nor_a_name_is_refused_naming_the_line(
        tmp_path, labels, line, why):
    data = digits_dataset(3, seed=0, alpha=0.3)
    csv = tmp_path / "groups.csv"
    csv.write_text("client,group\n" + "".join(f"{k},{g}\n" for k, g in enumerate(labels)))
    with pytest.raises(ValueError, match=re.escape(f"{csv}: line {line}: {why}")):
        read_groups_file(str(csv), data)


def test_the_command_line_runs_over_groups(tmp_path, capsys):
    assert main(["simulate", "--dataset", "grouped", "--clients", "5000", "--per-round", "100",
                 "--rounds", "2", "--eval-every", "1", "--eval-clients", "200", "--compare",
                 "fedavg,afl", "--fair-over", "groups", "--group-prior", "size", "--seeds", "0,1",
                 "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "worst grp" in out and "grp Gini" in out


def test_a_groups_file_names_leaf_users(tmp_path):
    from tests.helpers import sim_files as sf

    rng = np.random.default_rng(3)
    users = sf.femnist_users(rng, [12, 9, 14, 10, 11])
    sf.write_leaf(tmp_path / "leaf", sf.split_users(rng, users))
    names = list(users)
    csv = tmp_path / "regions.csv"
    csv.write_text("client,group\n" + "".join(f"{u},{'north' if i % 2 else 'south'}\n"
                                              for i, u in enumerate(names)))
    config = SimulationConfig(dataset="femnist", data_dir=str(tmp_path / "leaf"), clients=3,
                              per_round=3, rounds=1, eval_every=1, groups_file=str(csv),
                              fair_over="groups", model="logreg")
    data = build_dataset(config)  # 3 of the 5 users: the other rows are skipped
    expected = [0 if names.index(u) % 2 else 1 for u in data.users]
    assert list(data.group_ids) == expected and data.num_groups == max(expected) + 1
    record = Simulation(config).step()
    assert "acc_worst_group" in record
