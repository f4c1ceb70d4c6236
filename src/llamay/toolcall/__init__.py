"""Tool calls: the call formats of the major model families, the grammar that keeps a call on the offered
functions' schemas, and the streaming parser that turns model output back into calls."""
