"""``Aggregator.invalid_loss``: the per-client part of each rule's loss checks, which
the Flower strategy uses to drop one reply instead of refusing the round, says exactly what
``weights`` refuses."""

import numpy as np
import pytest

from fastfair import aggregators as agg
from fastfair.aggregators import registry

CONFIGS = {name: {} for name in registry.RULES if name != "aaggff-s"}
CONFIGS.update({"qfedavg-half": ("qfedavg", {"q": 0.5}),
                "qfedavg-eg": ("qfedavg", {"form": "eg"}),
                "propfair-eg": ("propfair", {"weighting": "eg", "M": 2.0}),
                # factors that take a finite loss beyond 2**1000 (once, the round was refused
                # instead of that one reply dropped)
                "term-tilt": ("term", {"tilt": 1e10}), "term-negative": ("term", {"tilt": -1e10}),
                "afl-step": ("afl", {"step_size": 1e10}),
                "fedmaba-step": ("fedmaba", {"step_size": 1e10}),
                "qfedavg-q": ("qfedavg", {"q": 5.0})})
LOSSES = [-1.0, -1e-300, 0.0, 0.5, 1.999, 2.0, 5.0, 1e60, 1e291, 1e300, 1e308]


def build(key):
    name, options = CONFIGS[key] if isinstance(CONFIGS[key], tuple) else (key, {})
    return registry.build(name, 4, **options)


@pytest.mark.parametrize("key", sorted(CONFIGS))
@pytest.mark.parametrize("loss", LOSSES)
def test_invalid_loss_says_what_weights_refuses(key, loss):
    rule = build(key)
    inputs = {"sq_norms": np.ones(2), "updates": np.eye(2), "thresholds": np.ones(2)}
    why = rule.invalid_loss(loss)
    call = lambda: rule.weights(np.arange(2), np.array([loss, 1.0]),  # noqa: E731
                                num_samples=np.ones(2),
                                **{k: inputs[k] for k in rule.round_inputs})
    if why is None:
        with np.errstate(over="ignore", invalid="ignore"):
            assert np.isfinite(np.asarray(call())).all()
    else:
        with pytest.raises(ValueError, match="losses must"):
            call()


def test_aaggff_s_declares_non_negative_losses():
    rule = agg.AAggFFS(3)
    assert rule.invalid_loss(-1.0) is not None and rule.invalid_loss(0.0) is None
