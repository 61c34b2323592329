"""rLLM main compatibility: estimator_map pairs, the new AlgorithmConfig fields, both from_config calls,
the trainer wiring, prpo, the new registry names, and both list-form signatures.

rLLM main is https://github.com/rllm-org/rllm, files rllm/trainer/algorithms/{config,advantage}.py and
rllm/trainer/unified_trainer.py; each test names the function whose behaviour it pins. Expected
numbers are worked out by hand in the test.
"""

import math
import warnings

import numpy as np
import pytest
from omegaconf import OmegaConf

from rllm_plugins import (
    AlgorithmConfig,
    RolloutCorrectionConfig,
    Step,
    Trajectory,
    TrajectoryGroup,
    build_algorithm_config,
    calculate_grpo_advantages,
    calculate_prpo_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    collect_reward_and_advantage_from_trajectory_groups,
    get_adv_estimator,
    get_rllm_adv_estimator,
    register_adv_estimator,
    register_rllm_adv_estimator,
    rLLMAdvantageEstimator,
    unregister_rllm_adv_estimator,
)
from rllm_plugins.config import USE_RLLM_DEPRECATION

EPS = 1e-6


def group(rewards, group_id):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2])], reward=r) for r in rewards], group_id=group_id)


def step_advantages(groups):
    return [[t.steps[0].advantage for t in g.trajectories] for g in groups]


# --- 1. estimator_map pairs (config.py: AlgorithmConfig.__post_init__ splits tuples into loss_fn_map) ---


def test_estimator_map_pairs_are_split_into_loss_fn_map():
    config = AlgorithmConfig(estimator_map={"judge": ("rloo", "ppo"), "solver": "grpo"})
    assert config.estimator_map == {"judge": rLLMAdvantageEstimator.RLOO, "solver": rLLMAdvantageEstimator.GRPO}
    assert config.loss_fn_map == {"judge": "ppo"}
    assert AlgorithmConfig().loss_fn_map == {}


def test_a_pair_from_a_yaml_list_is_split_too():
    node = OmegaConf.create({"adv_estimator": "grpo", "estimator_map": {"judge": ["reinforce", "cispo"]}})
    config = AlgorithmConfig.from_config(node)
    assert config.estimator_map == {"judge": rLLMAdvantageEstimator.REINFORCE} and config.loss_fn_map == {"judge": "cispo"}


def test_the_collector_uses_the_estimator_of_a_pair():
    groups = [group([1.0, 0.0, 0.0], "t0:judge"), group([1.0, 0.0], "t1:solver")]
    collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="grpo", estimator_map={"judge": ("rloo", "ppo")}))
    # judge, rloo: r_i - mean of the others
    judge = [1.0 - 0.0, 0.0 - 0.5, 0.0 - 0.5]
    # solver, grpo: (r - 0.5) / (0.5 + eps)
    solver = [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)]
    np.testing.assert_allclose(step_advantages(groups)[0], judge, rtol=1e-12)
    np.testing.assert_allclose(step_advantages(groups)[1], solver, rtol=1e-12)


@pytest.mark.parametrize(
    "value, message",
    [
        (("rloo", "ppo", "x"), r"estimator_map\['judge'\]: a pair must be \(estimator, loss_fn\), got 3 elements"),
        (("rloo", None), r"estimator_map\['judge'\]: the loss_fn of the pair must be a non-empty str, got NoneType None"),
    ],
)
def test_bad_pairs_are_errors(value, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(estimator_map={"judge": value})


def test_a_pair_and_loss_fn_map_must_agree():
    with pytest.raises(ValueError, match="role 'judge': estimator_map gives loss_fn 'ppo' but loss_fn_map gives 'cispo'; set it in one place"):
        AlgorithmConfig(estimator_map={"judge": ("rloo", "ppo")}, loss_fn_map={"judge": "cispo"})
    agreeing = AlgorithmConfig(estimator_map={"judge": ("rloo", "ppo")}, loss_fn_map={"judge": "ppo", "solver": "dro"})
    assert agreeing.loss_fn_map == {"judge": "ppo", "solver": "dro"}


# --- 2. the new fields, use_rllm, from_config (config.py: AlgorithmConfig and AlgorithmConfig.from_config) ---


def test_new_fields_have_rllm_mains_defaults():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = AlgorithmConfig()
    # the defaults written in rLLM main's AlgorithmConfig dataclass
    assert config.use_rllm is None
    assert (config.warmup_steps, config.warmup_steps_ratio, config.lr_schedule) == (-1, 0.0, "constant")
    assert (config.kl_beta, config.eps_clip, config.eps_clip_high, config.loss_agg_mode) == (0.0, 0.2, None, None)
    assert config.rollout_correction == RolloutCorrectionConfig(tis_mode=None, bypass_mode=None, tis_cap=5.0)
    assert (config.router_replay, config.mu_source, config.loss_fn) == ("disabled", "inference", None)
    assert (config.aux_losses, config.losses, config.loss_plugins) == ([], [], [])
    assert config.env_loss_coef == 0.0  # None resolves to 0.0 unless the estimator is rLLM's `echo`


@pytest.mark.parametrize("value", [True, False])
def test_use_rllm_warns_as_rllm_main_does(value):
    with pytest.warns(DeprecationWarning) as caught:
        config = AlgorithmConfig(use_rllm=value)
    assert str(caught[0].message) == (
        "`algorithm.use_rllm` is deprecated and ignored — advantages are always computed via the rLLM-native path. Remove the field from your config."
    )
    assert str(caught[0].message) == USE_RLLM_DEPRECATION and config.use_rllm is value


@pytest.mark.parametrize(
    "field, value",
    [("router_replay", "R4"), ("loss_agg_mode", "token-summ"), ("mu_source", "old"), ("lr_schedule", "exp")],
)
def test_a_value_outside_rllms_choices_is_an_error(field, value):
    with pytest.raises(ValueError, match=rf"AlgorithmConfig\.{field} must be one of .*, got '{value}'"):
        AlgorithmConfig(**{field: value})


# rLLM main's base config, rllm/trainer/config/rllm/base.yaml, section rllm.algorithm (values copied as plain data)
BASE_ALGORITHM = {
    "adv_estimator": "grpo",
    "norm_adv_by_std_in_grpo": True,
    "use_rllm": None,
    "use_precomputed_advantage": False,
    "loss_fn": None,
    "env_loss_coef": None,
    "loss_agg_mode": None,
    "lr_schedule": "constant",
    "warmup_steps": -1,
    "warmup_steps_ratio": 0.0,
    "kl_beta": 0.0,
    "eps_clip": 0.2,
    "eps_clip_high": None,
    "router_replay": "disabled",
    "rollout_correction": {"bypass_mode": None, "tis_mode": None, "tis_cap": 2.0},
}


def test_from_config_reads_rllm_mains_base_algorithm_node_without_warnings():
    node = OmegaConf.create(BASE_ALGORITHM)
    OmegaConf.set_struct(node, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = AlgorithmConfig.from_config(node, stepwise_advantage_mode="broadcast", estimator_map={"judge": ("rloo", "ppo")})
    assert config == AlgorithmConfig(
        estimator="grpo", estimator_map={"judge": "rloo"}, loss_fn_map={"judge": "ppo"}, rollout_correction=RolloutCorrectionConfig(tis_cap=2.0)
    )


def test_from_config_main_call_reads_every_field():
    node = {
        **BASE_ALGORITHM,
        "adv_estimator": "rloo",
        "norm_adv_by_std_in_grpo": False,
        "use_precomputed_advantage": True,
        "loss_fn": "ppo",
        "loss_agg_mode": "seq-mean-token-sum",
        "lr_schedule": "cosine",
        "warmup_steps": 10,
        "kl_beta": 0.05,
        "eps_clip": 0.3,
        "eps_clip_high": 0.4,
        "router_replay": "R2",
        "mu_source": "proximal",
        "rollout_correction": {"tis_mode": "token", "bypass_mode": True},  # tis_cap absent: rLLM's from_config default, 2.0
    }
    config = AlgorithmConfig.from_config(node)
    expected = {
        "estimator": rLLMAdvantageEstimator.RLOO,
        "norm_adv_by_std_in_grpo": False,
        "use_precomputed_advantage": True,
        "loss_fn": "ppo",
        "loss_agg_mode": "seq-mean-token-sum",
        "lr_schedule": "cosine",
        "warmup_steps": 10,
        "kl_beta": 0.05,
        "eps_clip": 0.3,
        "eps_clip_high": 0.4,
        "router_replay": "R2",
        "mu_source": "proximal",
        "rollout_correction": RolloutCorrectionConfig(tis_mode="token", bypass_mode=True, tis_cap=2.0),
    }
    assert {k: getattr(config, k) for k in expected} == expected


def test_from_config_main_call_warns_for_use_rllm():
    with pytest.warns(DeprecationWarning, match="use_rllm"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "use_rllm": True})


def test_spec_era_and_main_calls_agree():
    node = {"adv_estimator": "reinforce", "norm_adv_by_std_in_grpo": False, "kl_beta": 0.1}
    whole = {"rllm": {"algorithm": node, "stepwise_advantage": {"mode": "broadcast"}}}
    assert AlgorithmConfig.from_config(whole) == AlgorithmConfig.from_config(node, stepwise_advantage_mode="broadcast")


def test_an_unknown_key_is_an_error_not_a_silent_default():
    with pytest.raises(ValueError, match=r"the algorithm config: unknown key\(s\) \['norm_adv_by_std_in_gpro'\]\. Did you mean 'norm_adv_by_std_in_grpo'\?"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "norm_adv_by_std_in_gpro": False})
    with pytest.raises(ValueError, match=r"rllm\.algorithm: unknown key\(s\) \['estimatr_map'\]\. Did you mean 'estimator_map'\?"):
        AlgorithmConfig.from_config({"rllm": {"algorithm": {"estimatr_map": {"judge": "rloo"}}}})


def test_verls_algorithm_node_is_not_mistaken_for_rllms():
    # verl's own algorithm section (gamma, lam, ...) is not rLLM's algorithm node: its keys are named, not dropped
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['gamma', 'lam'\]"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "gamma": 1.0, "lam": 1.0})


def test_the_two_estimator_names_of_a_whole_config_must_agree():
    with pytest.raises(ValueError, match=r"algorithm\.adv_estimator='gae' and rllm\.algorithm\.adv_estimator='grpo' disagree"):
        AlgorithmConfig.from_config({"algorithm": {"adv_estimator": "gae"}, "rllm": {"algorithm": {"adv_estimator": "grpo"}}})
    same = AlgorithmConfig.from_config({"algorithm": {"adv_estimator": "RLOO"}, "rllm": {"algorithm": {"adv_estimator": "rloo"}}})
    assert same.estimator is rLLMAdvantageEstimator.RLOO


def test_from_config_estimator_map_argument_and_config_map_merge_or_conflict():
    node = {"adv_estimator": "grpo", "estimator_map": {"judge": "rloo"}}
    assert AlgorithmConfig.from_config(node, estimator_map={"solver": "reinforce"}).estimator_map == {"judge": "rloo", "solver": "reinforce"}
    with pytest.raises(ValueError, match=r"estimator_map\['judge'\]: the config gives 'rloo', the argument 'grpo'; set it in one place"):
        AlgorithmConfig.from_config(node, estimator_map={"judge": "grpo"})
    with pytest.raises(ValueError, match="stepwise_advantage_mode='broadcast' but the config says 'per_token'"):
        AlgorithmConfig.from_config({"rllm": {"stepwise_advantage": {"mode": "per_token"}}}, stepwise_advantage_mode="broadcast")


# --- norm_adv_by_std_in_grpo: rllm.algorithm (rLLM's base config) and rllm.stepwise_advantage (the spec) ---


def test_from_config_reads_norm_adv_from_rllm_algorithm():
    assert AlgorithmConfig.from_config({"rllm": {"algorithm": {"norm_adv_by_std_in_grpo": False}}}).norm_adv_by_std_in_grpo is False
    assert AlgorithmConfig.from_config({"rllm": {"stepwise_advantage": {"norm_adv_by_std_in_grpo": False}}}).norm_adv_by_std_in_grpo is False
    both = {"rllm": {"algorithm": {"norm_adv_by_std_in_grpo": False}, "stepwise_advantage": {"norm_adv_by_std_in_grpo": False}}}
    assert AlgorithmConfig.from_config(both).norm_adv_by_std_in_grpo is False
    # verl's own key stays the fallback when neither rLLM key is set
    assert AlgorithmConfig.from_config({"algorithm": {"norm_adv_by_std_in_grpo": False}}).norm_adv_by_std_in_grpo is False


def test_from_config_refuses_two_disagreeing_norm_adv_settings():
    config = {"rllm": {"algorithm": {"norm_adv_by_std_in_grpo": True}, "stepwise_advantage": {"norm_adv_by_std_in_grpo": False}}}
    with pytest.raises(ValueError, match=r"rllm\.algorithm\.norm_adv_by_std_in_grpo=True and rllm\.stepwise_advantage\.norm_adv_by_std_in_grpo=False disagree"):
        AlgorithmConfig.from_config(config)


def test_norm_adv_from_rllm_algorithm_changes_the_numbers():
    config = AlgorithmConfig.from_config({"rllm": {"algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False}}})
    groups = [group([1.0, 0.0], "t")]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert step_advantages(groups) == [[0.5, -0.5]]  # r - mean, no std division


# --- 4. prpo (advantage.py: calculate_prpo_advantages) ---


def prpo_by_hand(rewards_by_group, divide=True):
    flat = [r for g in rewards_by_group for r in g]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((r - mean) ** 2 for r in flat) / len(flat))
    return [[(r - mean) / (std + EPS) if divide else r - mean for r in g] for g in rewards_by_group]


def test_prpo_is_the_enum_member_and_ignores_norm_adv_as_rllm_main_does():
    assert rLLMAdvantageEstimator("prpo") is rLLMAdvantageEstimator.PRPO
    rewards = [[1.0, 0.0, 0.0], [1.0, 1.0]]
    for norm in (True, False):
        groups = [group(rewards[0], "a:r"), group(rewards[1], "b:r")]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator=rLLMAdvantageEstimator.PRPO, norm_adv_by_std_in_grpo=norm))
        for got, want in zip(step_advantages(groups), prpo_by_hand(rewards), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_prpo_main_signature_with_epsilon():
    rewards = [np.array([2.0, 0.0])]
    advantages, _ = calculate_prpo_advantages(rewards, AlgorithmConfig(norm_adv_by_std_in_grpo=False), 0.5)
    np.testing.assert_allclose(advantages[0], [1.0 / 1.5, -1.0 / 1.5], rtol=1e-12)  # mean 1, std 1, eps 0.5


def test_prpo_std_optional_keeps_the_flag():
    rewards = [[1.0, 0.0, 0.0], [1.0, 1.0]]
    fn = get_adv_estimator("prpo_std_optional")
    for norm in (True, False):
        advantages, _ = fn(rewards=[np.array(g) for g in rewards], norm_adv_by_std_in_grpo=norm)
        for got, want in zip(advantages, prpo_by_hand(rewards, divide=norm), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12)


# --- 5. the trainer wiring (unified_trainer.py: UnifiedTrainer._validate_and_setup_configs) ---


def test_build_algorithm_config_puts_the_map_into_estimator_map():
    config = OmegaConf.create({"rllm": {"algorithm": {"adv_estimator": "grpo"}, "stepwise_advantage": {"mode": "broadcast"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # main: no use_rllm, no warning
        built = build_algorithm_config(config, traj_group_adv_estimator_map={"solver": rLLMAdvantageEstimator.GRPO, "judge": rLLMAdvantageEstimator.REINFORCE})
    assert built.estimator_map == {"solver": rLLMAdvantageEstimator.GRPO, "judge": rLLMAdvantageEstimator.REINFORCE}
    assert built.estimator is rLLMAdvantageEstimator.GRPO


def test_build_algorithm_config_main_algorithm_node_with_pairs():
    built = build_algorithm_config({"adv_estimator": "rloo"}, {"judge": ("reinforce", "ppo")})
    assert built.estimator is rLLMAdvantageEstimator.RLOO and built.estimator_map == {"judge": "reinforce"} and built.loss_fn_map == {"judge": "ppo"}


@pytest.mark.parametrize("path", ["algorithm", "stepwise_advantage"])
def test_a_map_with_use_rllm_false_is_refused(path):
    # spec era: "If `traj_group_adv_estimator_map` is given, the user must explicitly turn `rllm.algorithm.use_rllm` to True"
    config = {"rllm": {path: {"use_rllm": False}}}
    with pytest.raises(ValueError, match=rf"traj_group_adv_estimator_map is given but rllm\.{path}\.use_rllm is false"):
        build_algorithm_config(config, {"judge": "rloo"})


def test_a_map_with_use_rllm_true_works_and_warns():
    with pytest.warns(DeprecationWarning, match="use_rllm"):
        built = build_algorithm_config({"rllm": {"algorithm": {"use_rllm": True}}}, {"judge": "rloo"})
    assert built.estimator_map == {"judge": "rloo"}


def test_without_a_map_use_rllm_false_is_only_deprecated():
    with pytest.warns(DeprecationWarning, match="use_rllm"):
        assert build_algorithm_config({"rllm": {"algorithm": {"use_rllm": False}}}).estimator_map == {}


# --- 6. the new registry names (advantage.py: register_adv_estimator, get_adv_estimator) ---


def test_register_and_get_adv_estimator_are_our_registry():
    assert register_adv_estimator is register_rllm_adv_estimator and get_adv_estimator is get_rllm_adv_estimator

    @register_adv_estimator("h13_negated")
    def negated(rewards, algorithm_config, **kwargs):
        return [-np.asarray(r) for r in rewards], [-np.asarray(r) for r in rewards]

    try:
        assert get_adv_estimator("h13_negated") is negated and get_rllm_adv_estimator("h13_negated") is negated
        groups = [group([1.0, 2.0], "t")]
        collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(estimator="h13_negated"))
        assert step_advantages(groups) == [[-1.0, -2.0]]
    finally:
        unregister_rllm_adv_estimator("h13_negated")


# --- the built-in list forms in both rLLM signatures (spec: (rewards, norm_adv_by_std_in_grpo, episilon); main: (rewards, algorithm_config)) ---


def test_list_form_honours_algorithm_config():
    advantages, _ = calculate_grpo_advantages(rewards=[[1, 0]], algorithm_config=AlgorithmConfig(norm_adv_by_std_in_grpo=False))
    np.testing.assert_array_equal(advantages[0], [0.5, -0.5])
    advantages, _ = calculate_grpo_advantages([[1, 0]], AlgorithmConfig(norm_adv_by_std_in_grpo=False))
    np.testing.assert_array_equal(advantages[0], [0.5, -0.5])


def test_an_explicit_keyword_wins_over_the_config():
    advantages, _ = calculate_grpo_advantages([[1, 0]], AlgorithmConfig(norm_adv_by_std_in_grpo=False), norm_adv_by_std_in_grpo=True)
    np.testing.assert_allclose(advantages[0], [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)], rtol=1e-12)


def test_spec_positional_arguments():
    rewards = [np.array([1.0, 0.0])]
    np.testing.assert_array_equal(calculate_grpo_advantages(rewards, False)[0][0], [0.5, -0.5])
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, True, 1e-3)[0][0], [0.5 / 0.501, -0.5 / 0.501], rtol=1e-12)
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, AlgorithmConfig())[0][0], [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)], rtol=1e-12)


def test_reinforce_plus_plus_baseline_positional_epsilon_in_both_signatures():
    rewards = [np.array([1.0, 0.0]), np.array([0.6, 0.4])]
    centred = [0.5, -0.5, 0.1, -0.1]  # r - group mean
    std = math.sqrt(sum(c * c for c in centred) / 4)  # their mean is 0
    want = [c / (std + 1e-3) for c in centred]
    for got in (
        calculate_reinforce_plus_plus_baseline_advantages(rewards, 1e-3)[0],
        calculate_reinforce_plus_plus_baseline_advantages(rewards, AlgorithmConfig(), 1e-3)[0],
    ):
        np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-12)


def test_positional_misuse_is_a_type_error_naming_the_forms():
    rewards = [np.array([1.0, 0.0])]
    with pytest.raises(TypeError, match=r"calculate_grpo_advantages\(\) takes at most 2 positional argument\(s\) after rewards here"):
        calculate_grpo_advantages(rewards, True, 1e-3, 7)
    with pytest.raises(TypeError, match=r"calculate_grpo_advantages\(\) got multiple values for argument 'norm_adv_by_std_in_grpo'"):
        calculate_grpo_advantages(rewards, True, norm_adv_by_std_in_grpo=False)
    with pytest.raises(TypeError, match=r"got multiple values for argument 'algorithm_config'"):
        calculate_grpo_advantages(rewards, AlgorithmConfig(), algorithm_config=AlgorithmConfig())


def test_echo_is_rllm_mains_enum_member_and_resolves_its_env_loss_coef():
    """rLLM main's config with ``adv_estimator: echo`` (before: no ECHO member, the name was OTHER)."""
    assert rLLMAdvantageEstimator("echo") is rLLMAdvantageEstimator.ECHO and rLLMAdvantageEstimator.ECHO.value == "echo"
    config = AlgorithmConfig.from_config(OmegaConf.create({"adv_estimator": "echo", "env_loss_coef": None}))
    assert config.estimator is rLLMAdvantageEstimator.ECHO and config.env_loss_coef == 0.05
    assert AlgorithmConfig.from_config({"adv_estimator": "echo", "env_loss_coef": 0.2}).env_loss_coef == 0.2


def test_echo_gives_grpos_advantages():
    rewards = [np.array([1.0, 0.0, 0.0]), np.array([0.5, 0.5]), np.array([2.0])]
    expected = []
    for r in rewards:  # rLLM's GRPO: population std, eps 1e-6; a group of one: mean 0, std 1
        mean, std = (0.0, 1.0) if r.size == 1 else (sum(r) / r.size, math.sqrt(sum((x - sum(r) / r.size) ** 2 for x in r) / r.size))
        expected.append([(x - mean) / (std + 1e-6) for x in r])
    config = AlgorithmConfig(estimator="echo")
    advantages, _ = get_adv_estimator(rLLMAdvantageEstimator.ECHO)(rewards, config)
    for got, want in zip(advantages, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    groups = [TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=x) for x in r], group_id=f"t{g}:solver") for g, r in enumerate(rewards)]
    collect_reward_and_advantage_from_trajectory_groups(groups, config)
    for group, want in zip(groups, expected, strict=True):
        np.testing.assert_allclose([t.steps[0].advantage for t in group.trajectories], want, rtol=1e-12)
