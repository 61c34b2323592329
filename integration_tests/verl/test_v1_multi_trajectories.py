"""verl's v1 path ``compute_advantage_for_multi_trajectories`` with ``rllm_*`` names.

verl collapses several outputs of one rollout (keys ``{uid}_{session}_{index}``) only for the
exact name ``grpo``; any other name, ``rllm_*`` included, gets every output row as a member of
its ``uid`` group.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue")
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories


def test_one_output_per_rollout_gives_the_rllm_values(ref, algorithm_config):
    rewards, uids = [1.0, 0.0, 0.0, 3.0, 1.0], ["a", "a", "a", "b", "b"]
    data = ref.make_batch(rewards, [3, 5, 1, 7, 2], uids)
    keys = [f"{u}_0_{i}" for i, u in enumerate(uids)]
    out = compute_advantage_for_multi_trajectories(data, keys, adv_estimator="rllm_rloo", config=algorithm_config())
    expected = ref.per_group(np.array(rewards), uids, ref.rloo)
    np.testing.assert_allclose(out.batch["advantages"].numpy(), ref.broadcast(expected, data.batch["response_mask"]), atol=1e-6)


def test_several_outputs_per_rollout_each_count_as_a_group_member(ref, algorithm_config):
    """Rollout a0 returned two outputs (turns 0 and 1): both rows join uid a's group, unlike verl's ``grpo``."""
    rewards, uids = [0.0, 1.0, 0.0], ["a", "a", "a"]
    keys = ["a_0_0", "a_0_1", "a_1_0"]
    data = ref.make_batch(rewards, [2, 2, 2], uids)
    ours = compute_advantage_for_multi_trajectories(data, keys, adv_estimator="rllm_grpo", config=algorithm_config())
    np.testing.assert_allclose(ours.batch["advantages"][:, 0].numpy(), ref.grpo(np.array(rewards)), atol=1e-6)
    theirs = compute_advantage_for_multi_trajectories(ref.make_batch(rewards, [2, 2, 2], uids), keys, adv_estimator="grpo", config=algorithm_config())
    # verl's grpo uses the final output of each session (rows 1 and 2) and broadcasts it to row 0
    np.testing.assert_allclose(theirs.batch["advantages"][:, 0].numpy(), [0.7071, 0.7071, -0.7071], atol=1e-4)
