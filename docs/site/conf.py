"""Sphinx configuration of the fastfair documentation site (built by ``.ci/docs``).

Sphinx rather than MkDocs: the docstrings are NumPy style with reST roles (``:class:``,
``:func:``, ``.. math::``), which autodoc and napoleon render and link as written.

The source directory is ``docs/`` (the guides are its Markdown files, as they are read on GitHub);
this folder holds the configuration, the front page and the API pages. The build is offline: no
intersphinx, a theme that ships in its wheel, and references to other projects' types are not
looked up (``nitpick_ignore_regex``), and maths is written as text with Unicode symbols
(``plain_math.py``), not typeset by a script from a CDN.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # fastfair_docs, the API directives

project = "fastfair"
author = "fastfair contributors"
copyright = "fastfair contributors"

# The package the reference documents (its compiled core included).
import fastfair  # noqa: E402 -- module code above it: the sys.path insert fastfair_docs needs

release = version = fastfair.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "plain_math",
    "fastfair_docs",
]
# Maths as text with Unicode symbols (plain_math.py): MathJax would be fetched from a CDN, and
# imgmath needs LaTeX where the site is built. Readable offline, in any browser.
html_math_renderer = "plaintext"

root_doc = "site/index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["site/_extra", "**/__pycache__"]

# Markdown (the README and docs/*.md): $...$ and $$...$$ math, and GitHub's heading anchors so
# that links such as algorithms.md#25-... resolve.
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 6

# The docstrings: NumPy style.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# Parameter, return and attribute types are shown as written (italic), not looked up as classes:
# the docstrings' types are prose ("float64 [m]", "sequence of ids"), not importable names.
napoleon_use_param = False
napoleon_use_rtype = False
napoleon_use_ivar = True
napoleon_use_keyword = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = True

# Every reference must resolve (a misspelt :class: path in a docstring is a build error), except
# references to other projects' types, which an offline build cannot look up.
nitpicky = True
nitpick_ignore_regex = [
    # Private names (documented nowhere: they render as code), and napoleon's reading of an
    # attribute docstring's "First words: ..." as a type.
    (r"py:.*", r"(.*\.)?_\w*(\..*)?"),
    (r"py:.*", r".*\s.*"),
    # Type variables (``T``, a registry's ``Builder``, the Flower reader's ``Reply``) in
    # signatures; torch's ``Module`` in docstrings that nn.Module's methods (forward) inherit.
    (r"py:class", r"(.*\.)?([A-Z]|Builder|Reply)"),
    (r"py:class", r"Module"),
    (r"py:.*", (r"(numpy|np|torch|flwr|scipy|pathlib|argparse|logging|typing|collections|"
                r"concurrent|contextlib|dataclasses|enum|io|os|json|re|abc|types|random)"
                r"(\..*)?")),
    (r"py:.*", (r"(int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|"
                r"callable|Callable|Any|Optional|Union|Sequence|Mapping|Iterable|Iterator|"
                r"Dict|List|Tuple|Set|Path|ndarray|Tensor|array-like|array_like|optional|"
                r"Generator|Literal|Type|TypeVar|Protocol|Exception|ValueError|TypeError|"
                r"KeyError|RuntimeError|ImportError|OSError|FileNotFoundError|"
                r"NotImplementedError|ArithmeticError|IndexError|Ellipsis|slice|complex|"
                r"memoryview|bytearray)")),
]

html_theme = "furo"
html_title = f"fastfair {release}"
html_static_path = []
# build/docs/index.html: a redirect to the front page (site/index.html).
html_extra_path = ["_extra"]
html_show_sourcelink = False
