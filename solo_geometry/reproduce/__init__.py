"""The paper's experiments and their verdicts (command: :mod:`solo_geometry.commands.reproduce`).

* :mod:`.collapse`: SimSiam from pseudo-collapse, a Hydra multirun sweep;
* :mod:`.invariance`: SimCLR with the paper's augmentations, probes, orbits, curvature, depth
  and whitening;
* :mod:`.hessian`: the authors' Hessian-tracker files re-read; :mod:`.paper_arrays`: their
  released invariance arrays;
* :mod:`.results`: the one verdict type and the result files' one writer and reader.

Each experiment writes a summary computed from the runs' own records and a verdict per claim
computed from this run's numbers.
"""
