"""Errors that the package raises for users to read, below every layer so
that any module may raise them."""


class ConfigCheckError(ValueError):
    """A config or launch names a path or value that cannot work; raised
    before training."""


class UnreadableCheckpointError(ValueError):
    """A file that does not read as a checkpoint under ``torch.load(weights_only=True)``."""
