"""verl's REINFORCE++-baseline by name (``compute_reinforce_plus_plus_baseline_outcome_advantage`` of verl 0.9).

First the group baseline, ``c_i = r_i - b_g`` with ``b_g = mean_g`` (0 for a group of one); then
verl's ``masked_whiten`` over every response token of the role, which weighs trajectory ``i`` by
its response length ``l_i`` (``L = sum_i l_i``)::

    m   = sum_i l_i c_i / L
    var = sum_i l_i (c_i - m)^2 / (L - 1)          (token-level sample variance)
    A_i = (c_i - m) / sqrt(var + 1e-8)

(verl divides by ``mask.sum() + 1e-8``, a float32 number in which the 1e-8 vanishes, and
multiplies by ``L / (L - 1)``.)

Needs ``lengths`` (N,), which the verl bridge takes from ``response_mask`` and the list form from
the steps' ``response_ids``. Unlike ``reinforce_plus_plus_baseline`` (trajectory-weighted, no
token counts) long responses weigh more. Where verl raises (fewer than two response tokens in
the role) every advantage is 0; a trajectory of length 0 gets ``(c_i - m) / sqrt(var + 1e-8)``
like any other (verl writes it to no token). ``epsilon`` and ``norm_adv_by_std_in_grpo`` do not
apply: the 1e-8 is verl's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..segments import GroupLayout
from ..spec import AdvEstimatorSpec, list_form_of

_TINY = 1e-8  # verl's masked_whiten variance floor


def _checked_lengths(lengths: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    if lengths is None:
        raise ValueError(
            "estimator 'verl_reinforce_plus_plus_baseline' needs the response length of every trajectory (its tokens are the "
            "whitening weights): pass lengths=(N,) or traj_groups with response_ids"
        )
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape != values.shape:
        raise ValueError(f"estimator 'verl_reinforce_plus_plus_baseline': lengths has shape {lengths.shape}, rewards have {values.shape}")
    bad = np.flatnonzero(~np.isfinite(lengths) | (lengths < 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"estimator 'verl_reinforce_plus_plus_baseline': trajectory {i} has length {lengths[i]}; lengths must be finite and >= 0")
    return lengths


def verl_reinforce_plus_plus_baseline(values: np.ndarray, offsets: np.ndarray, /, *, lengths: np.ndarray | None = None, **_: Any) -> np.ndarray:
    """verl's REINFORCE++-baseline: r - group mean (0 for a group of 1), whitened over response tokens; needs `lengths`."""
    layout = GroupLayout.from_offsets(offsets, len(values))
    lengths = _checked_lengths(lengths, values)
    tokens = float(lengths.sum())
    if tokens <= 1.0:
        return np.zeros(values.size)
    baseline = np.where(layout.sizes > 1, layout.mean(values), 0.0)
    centred = values - layout.expand(baseline)
    centred -= float(np.einsum("i,i->", lengths, centred)) / tokens  # einsum: no BLAS threads, no temporary
    with np.errstate(over="ignore"):
        squares = float(np.einsum("i,i,i->", lengths, centred, centred))
    if np.isfinite(squares):
        centred /= np.sqrt(squares / (tokens - 1.0) + _TINY)
        return centred
    spread = float(np.max(np.abs(centred)))  # squares overflowed: scale first
    centred /= spread
    variance = float(np.einsum("i,i,i->", lengths, centred, centred)) / (tokens - 1.0)
    centred /= np.sqrt(variance + _TINY / spread / spread)  # Python floats: inf, never an overflow error
    return centred


calculate_verl_reinforce_plus_plus_baseline_advantages = list_form_of(
    verl_reinforce_plus_plus_baseline, "calculate_verl_reinforce_plus_plus_baseline_advantages"
)

# options=(): every option of a built-in is a named parameter (its ``**_`` only takes the framework's arguments)
SPECS: tuple[AdvEstimatorSpec, ...] = (
    AdvEstimatorSpec(
        "verl_reinforce_plus_plus_baseline", calculate_verl_reinforce_plus_plus_baseline_advantages, verl_reinforce_plus_plus_baseline, options=()
    ),
)
