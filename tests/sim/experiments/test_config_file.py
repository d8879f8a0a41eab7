"""Configuration files are untrusted input: a YAML alias bomb, a self-referring alias, deep
nesting and an oversized file are refused at once with an error naming the file, before any
key is checked or any value copied; a fuzz test holds the reader to ValueError/TypeError naming
the file for any document."""

import json

import pytest

from fastfair.sim.experiments import config_file
from fastfair.sim.experiments.config_file import load_run_file, read_file


def alias_bomb(levels, width=9):
    """``levels`` levels of ``width`` aliases each: ``width ** levels`` leaves in a few hundred
    bytes."""
    lines = ["l0: &l0 [" + ", ".join(['"x"'] * width) + "]"]
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [6, 9])
def test_an_alias_bomb_is_refused_without_expanding_it(tmp_path, levels):
    path = tmp_path / "c.yaml"
    path.write_text(alias_bomb(levels))
    assert path.stat().st_size < 500
    with pytest.raises(ValueError, match=rf"{path} holds more than 100000 values once its "
                                         "YAML aliases"):
        load_run_file(path)


def test_aliases_within_the_bound_still_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rules: &r [fedavg, term]\ncompare_again: *r\n")
    with pytest.raises(ValueError, match="compare_again"):  # an unknown key, named as ever
        load_run_file(path)
    path.write_text("seeds: &s [0, 1]\nrules: [fedavg]\ngrid: {fedavg: {lr: *s}}\n")
    assert load_run_file(path).run["grid"] == {"fedavg": {"lr": [0, 1]}}


def test_an_alias_to_an_enclosing_node_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rules: &r [fedavg, *r]\n")
    with pytest.raises(ValueError, match=rf"{path} holds a list or table that contains itself"):
        load_run_file(path)


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".toml"])
def test_deep_nesting_is_refused_naming_the_file(tmp_path, suffix):
    path = tmp_path / f"c{suffix}"
    if suffix == ".toml":
        path.write_text("a = " + "[" * 40 + "]" * 40 + "\n")
    else:
        path.write_text('{"a": ' + "[" * 40 + "]" * 40 + "}")
    with pytest.raises(ValueError, match=rf"{path} nests lists and tables .* levels deep"):
        read_file(path)


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(config_file, "MAX_FILE_BYTES", 64)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"rounds": 3, "name": "x" * 100}))
    with pytest.raises(ValueError, match=rf"{path} \(configuration file\) is longer than 64"):
        read_file(path)


# --------------------------------------------------------------------------- fuzz

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

_KEYS = st.sampled_from(["rules", "rule", "compare", "seeds", "seed", "rounds", "config",
                         "grid", "rule_options", "baseline", "metrics", "batched", "lr",
                         "checkpoint_every", "select", "clients", "x"])
_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
            | st.sampled_from(["fedavg", "term", "1e-3", "0,1", ""]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(_KEYS | st.text(max_size=4), inner, max_size=4),
                       max_leaves=20)


def _yaml_text(doc, refs):
    """``doc`` as YAML with an anchor on its first list and ``refs`` aliases to it."""
    text = json.dumps(doc)  # JSON is YAML
    if refs and isinstance(doc, dict):
        anchor = "\n".join(f"r{k}: *a" for k in range(refs))
        return "a0: &a [1, [2, 3]]\n" + anchor + "\n" + "\n".join(
            f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items())
    return text


@hypothesis.settings(max_examples=40, derandomize=True, deadline=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(doc=st.dictionaries(_KEYS, _VALUES, max_size=6) | _VALUES,
                  suffix=st.sampled_from([".json", ".yaml", ".toml"]),
                  refs=st.integers(0, 3), garble=st.integers(0, 40))
def test_fuzz_the_reader_accepts_or_refuses_naming_the_file(tmp_path_factory, doc, suffix, refs,
                                                            garble):
    path = tmp_path_factory.mktemp("fuzz") / f"c{suffix}"
    if suffix == ".toml":
        text = "\n".join(f"{json.dumps(str(k))} = {json.dumps(v)}"
                         for k, v in (doc.items() if isinstance(doc, dict) else [("x", doc)]))
    elif suffix == ".yaml":
        text = _yaml_text(doc, refs)
    else:
        text = json.dumps(doc)
    if garble and text:  # a byte cut or doubled: text that may no longer parse
        cut = garble % len(text)
        text = text[:cut] + text[cut:][1:] if garble % 2 else text[:cut] + text[cut:] * 2
    path.write_text(text)
    try:
        run = load_run_file(path)
    except (ValueError, TypeError) as exc:
        assert str(path) in str(exc)
        hypothesis.event(f"refused {type(exc).__name__}")
    else:
        assert isinstance(run.config, dict) and run.path == path
        hypothesis.event("read")
