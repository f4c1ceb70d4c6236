"""Engine: requests, scheduling, sampling. For now only sampling is exported."""
from llamay.engine.sampling import Sampler, SamplingParams, apply_penalties, filter_candidates

__all__ = ["Sampler", "SamplingParams", "apply_penalties", "filter_candidates"]
