"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.reproduce.table import TABLES_DIR as TABLES_DIR
from fastfair.reproduce.table import TableSpec as TableSpec
from fastfair.reproduce.table import load_table as load_table
from fastfair.reproduce.table import table_names as table_names
