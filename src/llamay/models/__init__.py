"""Architectures as ArchSpecs over one generic decoder; unsupported ones refused at load, a file that
disagrees with itself refused with ModelFileError (checks.py) before any kernel sees it."""
from .checks import ModelFileError, UnsupportedModel
from .decoder import Decoder
from .spec import ArchSpec, arch_spec

__all__ = ["ArchSpec", "Decoder", "ModelFileError", "UnsupportedModel", "arch_spec"]
