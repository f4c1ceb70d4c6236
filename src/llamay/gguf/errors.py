class GGUFError(ValueError):
    """A GGUF file is malformed or unsupported; the message names the problem and the file."""
