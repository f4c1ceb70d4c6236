"""Architectures as ArchSpecs over one generic decoder; unsupported ones refused at load."""
from .decoder import Decoder
from .spec import ArchSpec, UnsupportedModel, arch_spec

__all__ = ["ArchSpec", "Decoder", "UnsupportedModel", "arch_spec"]
