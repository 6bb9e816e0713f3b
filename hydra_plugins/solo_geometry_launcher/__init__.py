"""Hydra launcher plugin of solo-geometry: multirun jobs in a pool of processes."""
