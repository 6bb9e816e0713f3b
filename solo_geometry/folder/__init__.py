"""One run's files: the record schema, the run folder, and where a killed run resumes from.

* :mod:`~solo_geometry.folder.records`: the versioned records a run writes (docs/run-folder.md);
* :mod:`~solo_geometry.folder.run_folder`:
  :class:`~solo_geometry.folder.run_folder.RunFolder`, every path in a run folder;
* :mod:`~solo_geometry.folder.resume`: the checkpoint a killed run resumes from, on either host;
* :mod:`~solo_geometry.folder.lock`: one writer per run folder (``<run>/.lock``);
* :mod:`~solo_geometry.folder.preempted`: a run stopped by SIGTERM or SIGUSR1, and its resume line;
* :mod:`~solo_geometry.folder.safe_files`: files opened without following links, sizes capped;
* :mod:`~solo_geometry.folder.field_types`: the one JSON codec of frozen dataclasses (the
  records, the reproductions' result files), each value checked against its field's type.

May import: nothing else of the package (no torch, no solo-learn): every floor above reads and
writes runs through it.
"""
