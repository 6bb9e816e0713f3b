"""The paper's experiments and their verdicts (command: :mod:`solo_geometry.commands.reproduce`).

:mod:`.collapse` and :mod:`.invariance` run them on :mod:`.data`'s images; :mod:`.hessian` and
:mod:`.paper_arrays` re-read the authors' released files; :mod:`.results` holds the one verdict
type and the result files' one writer and reader (docs/reproducing.md).
"""
