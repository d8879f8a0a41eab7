"""Every model of the simulator, registered by name on its builder
(:func:`fastfair.sim.registry.register_model`): the flat models of :mod:`.flat` and the papers'
networks of :mod:`.zoo`, each the default of its data set. The builders import their networks
(and torch) when they run, so the names cost nothing to list; :func:`build_model` builds one
for a data set under the run's seed.

A builder takes ``(dataset, hidden)``, a :class:`~fastfair.sim.data.base.FederatedDataset` and
the MLP width, and returns a :class:`~fastfair.sim.models.flat.FlatModel` or a
``torch.nn.Module`` for the data set's sample shape, classes and vocabulary. Adding a model is
one decorated builder here (its network may live in a module of its own).

========================  ==================================================================
``logreg``                multinomial logistic regression of the flattened features
``mlp``                   one hidden ReLU layer of ``hidden`` units
``femnist-cnn``           LEAF's FEMNIST CNN: two 5x5 convolutions (32, 64 channels, same
                          padding) each with ReLU and 2x2 max pooling, a 2048-unit ReLU layer
``cifar-cnn``             the same two-convolution network with a 512-unit layer (FedAvg's CNN)
                          for 32x32 colour images
``flgo-cifar-cnn``        easyFL's and FLGo's CIFAR-10 CNN (FedFV's and FedMABA's framework):
                          the images standardised by CIFAR-10's channel mean and std, two 5x5
                          convolutions (64, 64 channels, no padding) each with ReLU and 2x2
                          max pooling, ReLU layers of 384 and 192 units
``resnet8``               a small ResNet: a 3x3 stem and three stages of one basic block
                          (16, 32, 64 channels, batch norm), global average pooling
``celeba-cnn``            LEAF's CelebA CNN: four blocks of 3x3 convolution (32 channels),
                          batch norm, 2x2 max pooling and ReLU, then one linear layer
``char-lstm``             LEAF's Shakespeare model: an 8-dimensional character embedding, two
                          LSTM layers of 256 units and a linear layer at every position
``sent140-lstm``          LEAF's Sent140 model: a 100-dimensional word embedding (learned;
                          LEAF loads GloVe), two LSTM layers of 100 units, the last position's
                          output through a 128-unit ReLU layer and a linear layer
========================  ==================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastfair.sim.registry import ModelSpec, get_model, get_model_builder, register_model

if TYPE_CHECKING:
    from torch import nn

    from fastfair.sim.data.base import FederatedDataset
    from fastfair.sim.models.flat import FlatModel


def _features(dataset: FederatedDataset, model: str) -> int:
    """The flattened feature count of a data set of float samples (ValueError for token
    ids)."""
    if dataset.vocab_size is not None:
        raise ValueError(f"model {model!r} takes float features; the data set's samples are "
                         "token ids: choose a sequence model")
    return int(dataset.num_features)


@register_model(ModelSpec("logreg", ("features", "image"), None,
                          "multinomial logistic regression of the flattened features"))
def _logreg(dataset: FederatedDataset, hidden: int) -> FlatModel:
    from fastfair.sim.models.flat import LogisticRegression

    return LogisticRegression(_features(dataset, "logreg"), dataset.num_classes)


@register_model(ModelSpec("mlp", ("features", "image"), None,
                          "one hidden ReLU layer of --hidden units"))
def _mlp(dataset: FederatedDataset, hidden: int) -> FlatModel:
    from fastfair.sim.models.flat import MLP

    return MLP(_features(dataset, "mlp"), dataset.num_classes, hidden)


@register_model(ModelSpec("femnist-cnn", ("image",), 1024,
                          "LEAF's FEMNIST CNN: two 5x5 convolutions, a 2048-unit layer"))
def _femnist_cnn(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import two_conv_cnn

    return two_conv_cnn(dataset.sample_shape, dataset.num_classes, 2048, "femnist-cnn")


@register_model(ModelSpec("cifar-cnn", ("image",), 512,
                          "FedAvg's CNN: two 5x5 convolutions, a 512-unit layer"))
def _cifar_cnn(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import two_conv_cnn

    return two_conv_cnn(dataset.sample_shape, dataset.num_classes, 512, "cifar-cnn")


@register_model(ModelSpec("flgo-cifar-cnn", ("image",), 512,
                          "easyFL's and FLGo's CIFAR-10 CNN with their input standardisation"))
def _flgo_cifar_cnn(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import flgo_cifar_cnn

    return flgo_cifar_cnn(dataset.sample_shape, dataset.num_classes)


@register_model(ModelSpec("resnet8", ("image",), 256,
                          "a small ResNet of three basic blocks (16, 32, 64 channels)"))
def _resnet8(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import resnet8

    return resnet8(dataset.sample_shape, dataset.num_classes)


@register_model(ModelSpec("celeba-cnn", ("image",), 128,
                          "LEAF's CelebA CNN: four 3x3 convolution blocks"))
def _celeba_cnn(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import celeba_cnn

    return celeba_cnn(dataset.sample_shape, dataset.num_classes)


@register_model(ModelSpec("char-lstm", ("next-token",), 256,
                          "LEAF's Shakespeare model: two LSTM layers of 256 units"))
def _char_lstm(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import CharLSTM, vocabulary

    return CharLSTM(vocabulary(dataset, "char-lstm"), dataset.num_classes)


@register_model(ModelSpec("sent140-lstm", ("tokens",), 1024,
                          "LEAF's Sent140 model: two LSTM layers of 100 units"))
def _sent140_lstm(dataset: FederatedDataset, hidden: int) -> nn.Module:
    from fastfair.sim.models.zoo import SentimentLSTM, vocabulary

    return SentimentLSTM(vocabulary(dataset, "sent140-lstm"), dataset.num_classes)


def build_model(name: str, dataset: FederatedDataset, *, hidden: int = 64,
                seed: int = 0) -> FlatModel:
    """Model ``name`` (any of :func:`fastfair.sim.names.list_models`) for ``dataset`` (its
    sample shape, classes, vocabulary), checked against it
    (:func:`~fastfair.sim.models.flat.check_model`).

    ``logreg`` / ``mlp`` (``hidden`` units) take float samples of any shape; the networks are
    :class:`~fastfair.sim.models.module.ModuleModel` around the registered module, whose
    initial weights come from ``seed`` (the ``MODEL_INIT`` stream).
    """
    import torch

    from fastfair.sim.models.flat import FlatModel, check_model
    from fastfair.sim.models.module import ModuleModel
    from fastfair.sim.seeding import Stream, raw_seed

    spec = get_model(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(raw_seed(seed, Stream.MODEL_INIT))
        built = get_model_builder(name)(dataset, hidden)
        # Built under the seed already: a module's weights are the run's initial model.
        model = built if isinstance(built, FlatModel) else ModuleModel(
            built, init="given", eval_rows=spec.eval_rows or 1024)
    check_model(model, dataset)
    return model
