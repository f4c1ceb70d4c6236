"""The mixers that keep a recurrent state, by name (parts.MIXERS). Each is a module of three functions (and an optional fourth):

- tensors(spec, plan) -> {field: (GGUF name within blk.N., Expect)}: its weights; "o", the output
  projection, becomes the Layer's field (the layer fuses it into the residual add), the others go into
  Layer.mix;
- state_shapes(spec, plan) -> the shapes of the float32 arrays one state slot holds for the layer;
- build(builder, batch, states, plan, layer, inp, mm) -> the mixer's output [n, width] before "o", where
  states are the layer's pool arrays ([slots, *shape] each) and mm projects by a Layer field;
- prepare(plan, mix) -> mix, optional: the loaded weights repacked once (mixer_deltanet: ssm_ba's rows as
  beta and alpha)."""
from . import mixer_deltanet, mixer_kda, mixer_mamba, mixer_mamba2, mixer_shortconv

MIXERS = {"shortconv": mixer_shortconv, "mamba": mixer_mamba, "mamba2": mixer_mamba2, "deltanet": mixer_deltanet,
           "kda": mixer_kda}
