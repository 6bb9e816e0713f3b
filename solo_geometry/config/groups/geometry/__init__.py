"""The ``geometry`` config group: ``+geometry=on`` and ``+geometry=off``."""
