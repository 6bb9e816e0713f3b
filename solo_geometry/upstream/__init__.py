"""The patch series contributing this package's heads to solo-learn (generated, not stored).

``solo-geometry upstream export --solo-root PATH --out DIR`` computes the series against the
user's clean solo-learn checkout: a projector builder (``solo/utils/projectors.py``) with the
smooth MLP head and the metric-linear head, used by every method whose projector is the plain
Linear-[BatchNorm1d]-ReLU MLP, with unit tests, docs and a CIFAR recipe.
"""

from solo_geometry.upstream.edits import REQUIRED_METHODS, SeriesError
from solo_geometry.upstream.export import PR_FILE, ExportResult, export_series

__all__ = [
    "PR_FILE",
    "REQUIRED_METHODS",
    "ExportResult",
    "SeriesError",
    "export_series",
]
