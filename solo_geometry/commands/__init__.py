"""The commands of ``solo-geometry``: one module per command, parsers only.

Each module defines one top-level command's options and registers it with
``add_parser(subparsers)``, whose ``func`` (``run`` where there is one action) calls into the
library and returns the exit status; :mod:`solo_geometry.cli` lists the modules and holds the
one bad-input handler. No module here computes anything the library does not.

* :mod:`~solo_geometry.commands.data`: ``data digits``;
* :mod:`~solo_geometry.commands.probe`: ``probe`` (and ``torch_device``, the ``--device`` type);
* :mod:`~solo_geometry.commands.pretrain`: ``pretrain`` on either host;
* :mod:`~solo_geometry.commands.report`: ``report``;
* :mod:`~solo_geometry.commands.demo`: ``demo`` (``make demo``);
* :mod:`~solo_geometry.commands.orbits`: ``orbits FILE``;
* :mod:`~solo_geometry.commands.upstream`: ``upstream export``;
* :mod:`~solo_geometry.commands.zoo`: ``zoo {build,card,verify,list}``;
* :mod:`~solo_geometry.commands.analyse`: ``analyse CHECKPOINT``.

May import: every room of the library (:mod:`solo_geometry.reproduce`, :mod:`solo_geometry.zoo`,
:mod:`solo_geometry.upstream` and what they may); none of them imports a command, and only
:mod:`solo_geometry.cli` imports this package.
"""
