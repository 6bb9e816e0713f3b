"""Evaluation of a trained model: probes, the orbit table's inputs, and the run report.

* :mod:`~solo_geometry.analysis.evaluation`: backbone-vs-head evaluation on a labelled folder;
* :mod:`~solo_geometry.analysis.probes`: linear and MLP probes on cached features;
* :mod:`~solo_geometry.analysis.logreg`: the L-BFGS logistic regression behind the linear probe;
* :mod:`~solo_geometry.analysis.paper_probes`: the paper's rotation probes;
* :mod:`~solo_geometry.analysis.report`, :mod:`~solo_geometry.analysis.plots`: the report page
  and its figures;
* :mod:`~solo_geometry.analysis.orbit_files`: the paper's orbit table of saved orbit arrays.

May import: :mod:`solo_geometry.models`, :mod:`solo_geometry.inputs`, :mod:`solo_geometry.folder`,
:mod:`solo_geometry.geometry`, :mod:`solo_geometry.linalg` and the root's config and extras;
never the run-time core, a host or a command.
"""
