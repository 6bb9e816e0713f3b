"""The run-time core: what runs inside training, on any host.

* :mod:`~solo_geometry.runtime.measure`: one measurement, and the contract a module offers;
* :mod:`~solo_geometry.runtime.distributed`: measurements under DDP;
* :mod:`~solo_geometry.runtime.monitor`: :class:`~solo_geometry.runtime.monitor.GeometryMonitor`,
  the Lightning callback;
* :mod:`~solo_geometry.runtime.budget`: the monitor's time budget (which parts of a due record
  fit, and why the others wait);
* :mod:`~solo_geometry.runtime.updates`: per-epoch gradient norms and update sizes;
* :mod:`~solo_geometry.runtime.callbacks`: the end-of-fit steps and the callbacks every host
  attaches.

May import: :mod:`solo_geometry.analysis` (the end-of-fit probes and report) and everything it
may; never a host or a command, and solo-learn only inside a function.
"""
