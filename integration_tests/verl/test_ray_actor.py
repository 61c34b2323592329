"""In a real local Ray cluster, an actor that only imports verl sees ``rllm_rloo`` and computes with it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl")
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote
class TaskRunnerLike:
    """Stands where verl's TaskRunner computes advantages: a fresh worker process that imports verl and nothing of ours."""

    def rllm_names(self) -> list[str]:
        import verl  # noqa: F401 - the entry point registers on this import
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        return sorted(name for name in ADV_ESTIMATOR_REGISTRY if name.startswith("rllm_"))

    def rloo(self, rewards: list[float], uids: list[str]) -> list[float]:
        import torch
        import verl  # noqa: F401
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn

        token_level_rewards = torch.tensor(rewards).unsqueeze(-1)
        advantages, _ = get_adv_estimator_fn("rllm_rloo")(
            token_level_rewards=token_level_rewards, response_mask=torch.ones_like(token_level_rewards), index=np.array(uids, dtype=object)
        )
        return advantages[:, 0].tolist()

    def loaded(self) -> bool:
        import sys

        return "rllm_verl.verl_plugin" in sys.modules


def test_an_actor_that_only_imports_verl_computes_with_rllm_rloo(ray_cluster):
    actor = TaskRunnerLike.remote()
    names = ray.get(actor.rllm_names.remote(), timeout=180)
    assert {"rllm_rloo", "rllm_grpo", "rllm_median_baseline"} <= set(names)
    assert ray.get(actor.loaded.remote())
    advantages = ray.get(actor.rloo.remote([1.0, 0.0, 0.0, 2.0, 5.0], ["a", "a", "a", "b", "solo"]))
    # leave-one-out by hand: a -> 1 - 0, 0 - 0.5, 0 - 0.5; b alone keeps 2; solo keeps 5
    np.testing.assert_allclose(advantages, [1.0, -0.5, -0.5, 2.0, 5.0])
