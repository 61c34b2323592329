"""The built-in advantage transforms, registered as the first plugin (hook ``rllm_advantage_transforms``)."""

from __future__ import annotations

from collections.abc import Iterable

from ..discovery.hookspecs import hookimpl
from ..transform_spec import TransformSpec
from .clip import clip
from .codapo import codapo
from .kl_shaping import kl_shaping
from .scale import scale
from .whiten import whiten

BUILTIN_TRANSFORMS = (
    TransformSpec("clip", clip, "advantages limited to [min, max] (NeMo-RL's advantage clipping)", elementwise=True),
    TransformSpec("scale", scale, "positive advantages times `positive`, negative ones times `negative`", elementwise=True),
    TransformSpec("whiten", whiten, "advantages centred on their batch mean and divided by their batch std (REINFORCE++'s global normalisation)"),
    TransformSpec(
        "codapo",
        codapo,
        "each question's advantages times its CoDaValue (confidence x 4 accuracy (1 - accuracy)) plus weight_offset (CoDaPO, verl #7497)",
        requires=("offsets", "scores", "mean_logprobs"),
    ),
    TransformSpec(
        "kl_shaping",
        kl_shaping,
        "per-token KL to the reference folded into the advantage, centred on the batch: A_t += coef (mean KL - KL_t) (SkyRL #1262)",
        level="token",
        requires=("mask", "logprobs", "ref_logprobs"),
    ),
)


@hookimpl
def rllm_advantage_transforms() -> Iterable[TransformSpec]:
    return BUILTIN_TRANSFORMS
