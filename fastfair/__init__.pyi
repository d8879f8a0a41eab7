"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair._C import build_info as build_info
from fastfair._C import get_num_threads as get_num_threads
from fastfair._C import set_num_threads as set_num_threads
from fastfair.state import StateDict as StateDict
from fastfair.state import load_state as load_state
from fastfair.state import save_state as save_state

from . import aggregators as aggregators
from . import ops as ops
from . import reference as reference

__version__: str
