"""torchdevlint: find, fix and prove PyTorch device bugs."""

__version__ = "0.1.0"
