"""The paper's experiments as commands: ``solo-geometry reproduce collapse|invariance|all``."""
