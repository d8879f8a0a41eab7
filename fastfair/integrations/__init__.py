"""Integrations of fastfair with federated-learning frameworks.

Each submodule imports its framework only when it is itself imported, so ``import fastfair``
never pulls one in: ``fastfair.integrations.flwr`` needs ``pip install "fastfair[flower]"``.
"""
