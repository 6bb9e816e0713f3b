"""One run's files: the record schema, the run folder, and where a killed run resumes from.

* :mod:`~solo_geometry.folder.records`: the versioned records a run writes (docs/run-folder.md);
* :mod:`~solo_geometry.folder.run_folder`:
  :class:`~solo_geometry.folder.run_folder.RunFolder`, every path in a run folder;
* :mod:`~solo_geometry.folder.resume`: the checkpoint a killed run resumes from, on either host;
* :mod:`~solo_geometry.folder.lock`: one writer per run folder (``<run>/.lock``);
* :mod:`~solo_geometry.folder.preempted`: a run stopped by SIGTERM or SIGUSR1, and its resume line;
* :mod:`~solo_geometry.folder.safe_files`: files opened without following links, sizes capped;
* :mod:`~solo_geometry.folder.field_types`: a record's JSON values checked against its
  fields' types.

May import: nothing else of the package (no torch, no solo-learn): every floor above reads and
writes runs through it.
"""
