"""Maths that renders offline: a Sphinx HTML math renderer that writes each formula as text.

Sphinx's default renderer, MathJax, loads its script from a CDN, so a page opened without a
network shows raw TeX or nothing; ``imgmath`` needs LaTeX on the machine that builds; a vendored
MathJax or KaTeX is several megabytes. This renderer writes the TeX source itself, with the
common commands turned into their Unicode symbols (``\\sum`` -> ∑, ``\\lambda`` -> λ, ``\\le`` ->
≤, ...), in a ``<span class="math">`` (inline) or a ``<pre class="math">`` (display): readable as
it stands, in any browser, with no script. Formulas keep their TeX structure (``\\frac{a}{b}``,
sub- and superscripts), which is what a reader of the docstrings sees in the source too.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any, Dict, NoReturn

if TYPE_CHECKING:  # Sphinx's docutils, there when the site builds; to_text needs none
    from docutils import nodes

#: TeX commands written as the symbol they stand for (longest names first, so that ``\\leq`` is
#: not read as ``\\le`` followed by ``q``).
SYMBOLS: Dict[str, str] = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε",
    "zeta": "ζ", "eta": "η", "theta": "θ", "vartheta": "ϑ", "kappa": "κ", "lambda": "λ",
    "mu": "μ", "nu": "ν", "xi": "ξ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ",
    "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ", "omega": "ω", "Gamma": "Γ",
    "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Xi": "Ξ", "Pi": "Π", "Sigma": "Σ",
    "Phi": "Φ", "Psi": "Ψ", "Omega": "Ω", "sum": "∑", "prod": "∏", "int": "∫",
    "infty": "∞", "leq": "≤", "le": "≤", "geq": "≥", "ge": "≥", "neq": "≠", "ne": "≠",
    "approx": "≈", "sim": "∼", "propto": "∝", "cdot": "·", "times": "×", "div": "÷",
    "pm": "±", "mp": "∓", "in": "∈", "notin": "∉", "subset": "⊂", "subseteq": "⊆",
    "cup": "∪", "cap": "∩", "emptyset": "∅", "forall": "∀", "exists": "∃", "nabla": "∇",
    "partial": "∂", "to": "→", "rightarrow": "→", "leftarrow": "←", "gets": "←",
    "Rightarrow": "⇒", "mapsto": "↦", "ldots": "…", "cdots": "⋯", "dots": "…",
    "langle": "⟨", "rangle": "⟩", "lVert": "‖", "rVert": "‖", "Vert": "‖", "|": "‖",
    "odot": "⊙", "otimes": "⊗", "oplus": "⊕", "top": "⊤", "star": "⋆", "circ": "∘",
    "sqrt": "√", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "quad": "  ", "qquad": "    ", ",": " ", ";": " ", "!": "", "left": "", "right": "",
    "big": "", "Big": "", "bigl": "", "bigr": "", "Bigl": "", "Bigr": "",
    "displaystyle": "", "textstyle": "", "ell": "ℓ", "mid": "|", "log": "log", "exp": "exp",
    "max": "max", "min": "min", "sup": "sup", "inf": "inf", "arg": "arg", "det": "det",
}
_COMMAND = re.compile(r"\\(" + "|".join(re.escape(n) for n in
                                        sorted(SYMBOLS, key=len, reverse=True))
                      + r")(?![A-Za-z])")
#: ``\mathrm{x}``, ``\text{x}``, ``\operatorname{x}``...: the argument, as text.
_TEXT = re.compile(r"\\(?:mathrm|text|textrm|mathit|mathbf|mathbb|mathcal|operatorname|"
                   r"boldsymbol|mathsf|mathtt)\s*\{([^{}]*)\}")


def to_text(tex: str) -> str:
    """``tex`` with its common commands as Unicode symbols (see :data:`SYMBOLS`)."""
    text = _TEXT.sub(r"\1", tex)
    return _COMMAND.sub(lambda m: SYMBOLS[m.group(1)], text)


def _skip_node() -> NoReturn:
    """Ends the node's visit (Sphinx's docutils is loaded only while the site builds)."""
    from docutils import nodes

    raise nodes.SkipNode


def _inline(self: Any, node: "nodes.Element") -> None:
    self.body.append(f'<span class="math notranslate">{html.escape(to_text(node.astext()))}'
                     "</span>")
    _skip_node()


def _block(self: Any, node: "nodes.Element") -> None:
    self.body.append(f'<pre class="math notranslate">{html.escape(to_text(node.astext()))}'
                     "</pre>\n")
    _skip_node()


def setup(app: Any) -> Dict[str, Any]:
    app.add_html_math_renderer("plaintext", (_inline, None), (_block, None))
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
