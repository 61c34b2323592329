"""The per-turn advantages of one group of the last step, next to the one advantage ``grpo`` gives each episode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rllm_plugins import calculate_grpo_advantages_per_group


def turn_table(trainer: Any, replies: Sequence[Sequence[str]], options: Mapping[str, Any]) -> str:
    """A table of one group (``num_generations`` episodes) of ``trainer``'s last step: the first whose rewards differ, else the first.

    ``replies[i]``: the tool results episode ``i`` saw; its turn ``t`` comes after result ``t - 1`` (the
    anchor state), turn 0 after the prompt. Per episode: the results, the reward, the step-level estimator's
    advantage of each turn (``trainer.last_step_advantages``) and ``grpo``'s (the episode's z-score in its
    group, given to every turn). Empty when the estimator is not step-level.
    """
    result, all_rewards = trainer.last_step_advantages, trainer.last_reward_batch.rewards
    if result is None:
        return ""
    size, name = trainer.num_generations, trainer.args.adv_estimator
    starts = range(0, all_rewards.size, size)
    start = next((s for s in starts if all_rewards[s : s + size].max() > all_rewards[s : s + size].min()), 0)
    rewards = all_rewards[start : start + size]
    grpo, _ = calculate_grpo_advantages_per_group(rewards)
    settings = ", ".join(f"{key} {value}" for key, value in options.items())
    lines = [
        f"group {start // size} of the last step: per-turn advantages of {name} ({settings}) and grpo's",
        f"{'episode':>7}  {'results':<9}  {'reward':>6}  {name + ', one per turn':<30}  grpo, every turn",
    ]
    for i, row in enumerate(range(start, start + size)):
        per_turn = " ".join(f"{value:+.3f}" for value in result.values[result.offsets[row] : result.offsets[row + 1]])
        lines.append(f"{row:>7}  {' '.join(replies[row]) or '-':<9}  {rewards[i]:>6.1f}  {per_turn:<30}  {grpo[i]:+.3f}")
    return "\n".join(lines)
