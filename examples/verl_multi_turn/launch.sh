#!/usr/bin/env bash
# GiGPO on verl with the corridor agent loop. Run from this folder (so `anchored_agent_loop` is importable) with your
# data and model (data.train_files=..., actor_rollout_ref.model.path=...) appended; needs GPUs for the rollout.
# verl's default v1 trainer; for the legacy trainer add trainer.use_v1=false (the advantages are the same).
# Check first, with the same overrides: rllm-plugins verl-check <the overrides below>; rehearse the agent loop on a CPU:
# rllm-plugins verl-rehearse <the overrides below> --prompt "walk the corridor" --replies "+,-,++"
set -euo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=rllm_gigpo \
    algorithm.gamma=0.95 \
    +algorithm.rllm_estimator_kwargs.step_advantage_w=1.0 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.multi_turn.enable=true \
    actor_rollout_ref.rollout.agent.agent_loop_config_path=agent_loops.yaml \
    actor_rollout_ref.rollout.agent.default_agent_loop=corridor \
    "$@"
