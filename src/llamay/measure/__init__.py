"""Tools built on the engine: benchmarks (later: verify, quantize, perplexity)."""
