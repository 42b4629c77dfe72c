"""Benchmark problems for BBKB: finite candidate sets with known values, all maximised.

* :class:`Problem` - candidates ``(A, d)``, noiseless values ``(A,)``, Gaussian noise.
* :mod:`.functions` - standard test functions (negated: minima become maxima) and
  :func:`function_problem`, a Sobol discretisation that contains the true optimum.
* :mod:`.datasets` - the Abalone and California-housing regression sets, one arm per row.

Pure numpy/scipy: safe to import from workers, tests and benchmarks.
"""

from .datasets import DATASETS, DatasetName, dataset_problem, load_dataset
from .functions import FUNCTIONS, FunctionSpec, TestFunction, function_problem, get_function
from .problem import Problem

__all__ = [
    "DATASETS",
    "FUNCTIONS",
    "DatasetName",
    "FunctionSpec",
    "Problem",
    "TestFunction",
    "dataset_problem",
    "function_problem",
    "get_function",
    "load_dataset",
]
