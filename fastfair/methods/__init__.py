"""Federated algorithms that are not coefficient rules: FedEvg (a federated energy-based model
that synthesises a server-side data set) and SuPerFed-MM / -LM (personalisation along a low-loss
line between a federated and a local model). No simulator code: :mod:`fastfair.sim` runs them.
"""

#: The methods by the public name the simulator and the command line use.
METHODS = ("fedevg", "superfed-mm", "superfed-lm")
