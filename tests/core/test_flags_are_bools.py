"""``norm_adv_by_std_in_grpo`` and ``epsilon`` are checked wherever a user gives them: ``"false"`` is truthy.

Each case below was silently the opposite before: a str ``"false"`` (or a float in the spec's
positional ``norm_adv_by_std_in_grpo`` slot) divided by the std as if it were True.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups, get_rllm_adv_estimator
from rllm_plugins.estimators import calculate_grpo_advantages, calculate_reinforce_plus_plus_baseline_advantages
from rllm_plugins.types import Step, Trajectory, TrajectoryGroup

PAIR = [np.array([1.0, 0.0])]


@pytest.mark.parametrize("field", ["norm_adv_by_std_in_grpo", "use_precomputed_advantage"])
@pytest.mark.parametrize("value", ["false", "False", 0, 1, None, 0.0])
def test_algorithm_config_flags_must_be_bools(field, value):
    with pytest.raises(ValueError) as error:
        AlgorithmConfig(**{field: value})
    assert str(error.value) == f"AlgorithmConfig.{field} must be a bool (True or False), got {type(value).__name__} {value!r}"


def test_from_config_with_a_str_flag_is_refused_not_read_as_true():
    with pytest.raises(ValueError, match=r"AlgorithmConfig.norm_adv_by_std_in_grpo must be a bool \(True or False\), got str 'false'"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": "false"})


def test_a_numpy_bool_flag_is_a_bool():
    config = AlgorithmConfig(norm_adv_by_std_in_grpo=np.False_)
    assert config.norm_adv_by_std_in_grpo is False
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0)], group_id="g")
    collect_reward_and_advantage_from_trajectory_groups([group], config)
    assert [t.steps[0].advantage for t in group.trajectories] == [0.5, -0.5]  # r - mean, no std


@pytest.mark.parametrize("value", ["false", 0, 1e-3, np.float64(1e-3)])
def test_the_spec_positional_norm_flag_must_be_a_bool(value):
    # spec: calculate_grpo_advantages(rewards, norm_adv_by_std_in_grpo, episilon); a float here is a misplaced epsilon
    with pytest.raises(ValueError) as error:
        calculate_grpo_advantages(PAIR, value)
    assert str(error.value) == (f"calculate_grpo_advantages(): norm_adv_by_std_in_grpo must be a bool (True or False), got {type(value).__name__} {value!r}")


def test_the_list_form_still_takes_both_bools_and_the_config():
    assert np.allclose(calculate_grpo_advantages(PAIR, np.False_)[0][0], [0.5, -0.5])
    assert np.allclose(calculate_grpo_advantages(PAIR, False, 0.5)[0][0], [0.5, -0.5])
    assert np.allclose(calculate_grpo_advantages(PAIR, True, 0.5)[0][0], [0.5, -0.5])  # 0.5 / (0.5 + 0.5)


@pytest.mark.parametrize("value", [False, "1e-3", -1.0, float("nan"), None])
def test_list_form_epsilon_must_be_a_finite_non_negative_number(value):
    with pytest.raises(ValueError) as error:
        calculate_reinforce_plus_plus_baseline_advantages(PAIR, value)  # spec: (rewards, epsilon)
    assert str(error.value) == (
        f"calculate_reinforce_plus_plus_baseline_advantages(): epsilon must be a finite number >= 0, got {type(value).__name__} {value!r}"
    )


def test_from_config_reads_only_what_it_needs_of_a_whole_config():
    # before: the whole rllm section was converted to see that it exists, so a "???" (set later) or an
    # unresolvable interpolation in an unrelated key raised MissingMandatoryValue
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create(
        {"rllm": {"algorithm": {"adv_estimator": "rloo", "norm_adv_by_std_in_grpo": False}, "trainer": {"experiment_name": "???"}}}
    )
    omegaconf.OmegaConf.set_struct(config, True)
    algorithm = AlgorithmConfig.from_config(config)
    assert (algorithm.estimator, algorithm.norm_adv_by_std_in_grpo) == ("rloo", False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"estimator": 3}, "AlgorithmConfig.estimator must be an estimator name (a str or rLLMAdvantageEstimator), got int 3"),
        ({"estimator_map": {"judge": None}}, "estimator_map['judge'] must be an estimator name (a str or rLLMAdvantageEstimator), got NoneType None"),
        ({"estimator_map": {"judge": (None, "ppo")}}, "estimator_map['judge'] must be an estimator name (a str or rLLMAdvantageEstimator), got NoneType None"),
    ],
)
def test_an_estimator_that_is_no_name_is_a_value_error_naming_the_role(kwargs, message):
    # before: TypeError without the role
    with pytest.raises(ValueError) as error:
        AlgorithmConfig(**kwargs)
    assert str(error.value) == message


LIST_FORMS_WITH_THE_FLAG = [
    "grpo",
    "prpo_std_optional",
    "passk_training",
    "trl_grpo",
    "verl_grpo",
    "grpo_passk",
]


@pytest.mark.parametrize("name", LIST_FORMS_WITH_THE_FLAG)
def test_a_none_norm_flag_given_by_keyword_is_refused_not_read_as_false(name):
    estimator = get_rllm_adv_estimator(name)
    with pytest.raises(ValueError) as error:
        estimator(PAIR, norm_adv_by_std_in_grpo=None)
    assert str(error.value) == f"{estimator.__name__}(): norm_adv_by_std_in_grpo must be a bool (True or False), got NoneType None"


@pytest.mark.parametrize("name", LIST_FORMS_WITH_THE_FLAG)
def test_a_none_norm_flag_of_an_algorithm_config_is_refused_and_named_as_coming_from_it(name):
    class RllmConfig:  # any object with rLLM's attributes, as rLLM reads it
        estimator = name
        norm_adv_by_std_in_grpo = None

    estimator = get_rllm_adv_estimator(name)
    with pytest.raises(ValueError) as error:
        estimator(PAIR, RllmConfig())
    assert str(error.value) == (f"{estimator.__name__}(): norm_adv_by_std_in_grpo (from algorithm_config) must be a bool (True or False), got NoneType None")


def test_a_none_norm_flag_given_positionally_is_refused():
    with pytest.raises(ValueError, match=r"^calculate_grpo_advantages\(\): norm_adv_by_std_in_grpo must be a bool \(True or False\), got NoneType None$"):
        calculate_grpo_advantages(PAIR, None)


def test_a_fraction_epsilon_is_refused_by_the_list_form():
    with pytest.raises(ValueError) as error:
        calculate_reinforce_plus_plus_baseline_advantages(PAIR, Fraction(1, 10))
    assert str(error.value) == "calculate_reinforce_plus_plus_baseline_advantages(): epsilon must be a finite number >= 0, got Fraction Fraction(1, 10)"


@pytest.mark.parametrize(
    ("estimator", "kwargs", "message"),
    [
        (
            "grpo",
            {"epsilon": Fraction(1, 10000)},
            "AlgorithmConfig.estimator_kwargs: option 'epsilon' of estimator 'grpo' must be a number >= 0, got Fraction Fraction(1, 10000); "
            "numpy cannot compute with it: pass float(value)",
        ),
        (
            "gpg",
            {"f_norm": Fraction(1, 2)},
            "AlgorithmConfig.estimator_kwargs: option 'f_norm' of estimator 'gpg' must be a number, got Fraction Fraction(1, 2); "
            "numpy cannot compute with it: pass float(value)",
        ),
    ],
)
def test_a_fraction_option_is_refused_before_any_estimator_runs(estimator, kwargs, message):
    group = TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1])], reward=r) for r in (1.0, 0.0)], group_id="g")
    with pytest.raises(ValueError) as error:
        collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator=estimator, estimator_kwargs=kwargs))
    assert str(error.value) == message
    assert all(t.steps[0].advantage is None for t in group.trajectories)
