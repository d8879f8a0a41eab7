"""Names only: every data set the simulator knows with its family, default model and whether its
clients are the data set's own users, and every model name. Importing this costs nothing; the
loaders are imported when a data set is opened."""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple


class DatasetSpec(NamedTuple):
    """A data set: ``family`` is ``generated`` (synthetic, grouped, digits), ``leaf`` (LEAF JSON),
    ``vision`` (torchvision's layouts, split across ``clients`` by a partition scheme),
    ``npz`` (one file per client), ``images`` (image files in class folders) or ``table``
    (UCI Adult's CSV files); ``natural_split``: the clients are the data set's users;
    ``inputs``: what its samples are (``features``, ``image``, ``tokens`` with one label,
    ``next-token`` with a label per position; None: known once the files are read)."""

    name: str
    family: str
    default_model: str
    natural_split: bool
    inputs: Optional[str]
    summary: str


#: Every data set by its public name (``--dataset``), with its :class:`DatasetSpec`.
DATASETS: Dict[str, DatasetSpec] = {s.name: s for s in [
    DatasetSpec("synthetic", "generated", "logreg", False, "features",
                "Synthetic(alpha, beta), generated per client"),
    DatasetSpec("grouped", "generated", "logreg", False, "features",
                "latent groups of power-law sizes, each a shift of a common model"),
    DatasetSpec("digits", "generated", "logreg", False, "features",
                "scikit-learn's digits, split by --partition"),
    DatasetSpec("femnist", "leaf", "femnist-cnn", True, "image",
                "LEAF FEMNIST: 28x28 characters of 62 classes, one client per writer"),
    DatasetSpec("shakespeare", "leaf", "char-lstm", True, "next-token",
                "LEAF Shakespeare: next character of 80-character lines, one client per role"),
    DatasetSpec("celeba", "leaf", "celeba-cnn", True, "image",
                "LEAF CelebA: smiling or not from 84x84 faces, one client per celebrity"),
    DatasetSpec("sent140", "leaf", "sent140-lstm", True, "tokens",
                "LEAF Sent140: tweet sentiment from 25 words, one client per user"),
    DatasetSpec("mnist", "vision", "femnist-cnn", False, "image",
                "MNIST (torchvision's IDX files), split by --partition"),
    DatasetSpec("fmnist", "vision", "femnist-cnn", False, "image",
                "Fashion-MNIST (torchvision's IDX files), split by --partition"),
    DatasetSpec("cifar10", "vision", "cifar-cnn", False, "image",
                "CIFAR-10 (torchvision's python pickles), split by --partition"),
    DatasetSpec("cifar100", "vision", "resnet8", False, "image",
                "CIFAR-100, fine labels (torchvision's python pickles), split by --partition"),
    DatasetSpec("npz-clients", "npz", "mlp", True, None,
                "a folder of one .npz per client (x, y, optional x_test, y_test)"),
    DatasetSpec("image-folder", "images", "cifar-cnn", False, "image",
                "your images in class subfolders (train/<class>/*, test/<class>/*), split by "
                "--partition"),
    DatasetSpec("adult", "table", "logreg", False, "features",
                "UCI Adult: income over 50K from census columns (one-hot), split by --partition "
                "(column:education=Doctorate: AFL's two clients)"),
]}

#: Every model (the flat models of fastfair.sim.models.flat, the networks of
#: fastfair.sim.models.zoo) with the inputs it takes.
MODELS: Dict[str, Tuple[str, ...]] = {
    "logreg": ("features", "image"), "mlp": ("features", "image"), "femnist-cnn": ("image",),
    "cifar-cnn": ("image",), "resnet8": ("image",), "celeba-cnn": ("image",),
    "char-lstm": ("next-token",), "sent140-lstm": ("tokens",)}


def check_pair(dataset: str, model: Optional[str]) -> None:
    """Raises ValueError when ``model`` (None: the data set's default) cannot take the samples
    of ``dataset``, naming the models that can."""
    spec = DATASETS[dataset]
    name = model or spec.default_model
    if spec.inputs is not None and spec.inputs not in MODELS[name]:
        fits = [m for m, inputs in MODELS.items() if spec.inputs in inputs]
        raise ValueError(f"model {name!r} cannot take {dataset}'s samples ({spec.inputs}); "
                         f"choose from {', '.join(fits)}")


def default_model_note(dataset: str, model: Optional[str]) -> Optional[str]:
    """The line a run on a data set read from files shows when it trains the data set's default
    model (``model`` None): ``"npz-clients: training the default model 'mlp' (choose one with
    --model)"``; None when the model was chosen or the data are generated."""
    spec = DATASETS[dataset]
    if model is not None or spec.family == "generated":
        return None
    return (f"{dataset}: training the default model {spec.default_model!r} (choose one with "
            "--model)")
