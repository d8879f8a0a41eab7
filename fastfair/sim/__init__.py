"""Cross-device federated simulation: data sets that cost nothing until a client is sampled,
batched local training of thousands of clients at once, fairness metrics, and experiments that
run several rules on identical data, client samples and seeds (:class:`Experiment`), and sweeps
of rules x seeds x hyperparameter grids as one batched program with their statistics
(:class:`Sweep`). The public names below load on first use, so that ``fastfair --help`` and the
option checks import neither torch nor the training code.

The sub-packages are the layers, each importing only those before it:

- top-level modules: :mod:`~fastfair.sim.registry` and :mod:`~fastfair.sim.names` (every data
  set and model by name, with NumPy alone), :mod:`~fastfair.sim.config` (every option),
  :mod:`~fastfair.sim.seeding` (every random stream), :mod:`~fastfair.sim.distributed`,
  :mod:`~fastfair.sim.process` (threads, allocator), :mod:`~fastfair.sim.checkpoint` (safe
  state files), :mod:`~fastfair.sim.products` (affine products of m models);
- :mod:`~fastfair.sim.data`: every data set by name;
- :mod:`~fastfair.sim.models`: flat models, any ``nn.Module``, the papers' networks;
- :mod:`~fastfair.sim.training`: a cohort's local training and evaluation;
- :mod:`~fastfair.sim.reporting`: metrics, statistics, output files, round callbacks;
- :mod:`~fastfair.sim.population`: device populations and selection on a virtual clock;
- :mod:`~fastfair.sim.rounds`: the round runners (rules, FedEvg, SuPerFed) and what they build;
- :mod:`~fastfair.sim.experiments`: experiments and sweeps, their run folders and checkpoints.
"""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
