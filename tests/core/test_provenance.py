"""Which code computed the advantages: the record and its line from real collector calls, with the built-ins, an
installed third-party plugin (``examples/rllm-median-baseline``) and user code; the architecture page's snippet runs."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from rllm_plugins import AlgorithmConfig, Step, Trajectory, TrajectoryGroup, collect_reward_and_advantage_from_trajectory_groups
from rllm_plugins.advantage import AdvantageMetrics
from rllm_plugins.provenance import changed_code, package_version, provenance, provenance_line
from rllm_plugins.registry import get_estimator, register_rllm_adv_estimator, unregister_rllm_adv_estimator

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
PLUGIN = "rllm-median-baseline"


def group(task, role, rewards):
    return TrajectoryGroup([Trajectory(steps=[Step(response_ids=[1, 2]), Step(response_ids=[3])], reward=r) for r in rewards], group_id=f"{task}:{role}")


def test_package_version_is_the_installed_distributions():
    assert package_version() == metadata.version("rllm-plugins")


def test_the_collector_names_an_installed_plugin_with_its_distribution_and_version_and_keeps_its_metrics_floats():
    groups = [group("q1", "solver", [1.0, 0.0, 3.0]), group("q1", "judge", [1.0, 0.0])]
    config = AlgorithmConfig(estimator="grpo", estimator_map={"solver": "median_baseline"}, advantage_transforms=[("clip", {"max": 2.0})])
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    assert isinstance(metrics, AdvantageMetrics) and isinstance(metrics, dict)
    assert all(isinstance(value, float) for value in metrics.values())
    version = metadata.version(PLUGIN)
    assert metrics.provenance == {
        "estimators": {
            "judge": {"name": "grpo", "source": "built-in", "plugin": "builtin", "distribution": "rllm-plugins", "version": package_version()},
            "solver": {"name": "median_baseline", "source": "plugin", "plugin": "median_baseline", "distribution": PLUGIN, "version": version},
        },
        "options": {"norm_adv_by_std_in_grpo": True},
        "transforms": [
            {"name": "clip", "options": {"max": 2.0}, "source": "built-in", "plugin": "builtin", "distribution": "rllm-plugins", "version": package_version()}
        ],
        "rllm_plugins": package_version(),
    }
    assert metrics.provenance_line == (
        f'judge: grpo [built-in], solver: median_baseline [{PLUGIN} {version}]; options {{"norm_adv_by_std_in_grpo":true}}; '
        f'transforms clip{{"max":2.0}} [built-in]; rllm-plugins {package_version()}'
    )
    assert json.loads(json.dumps(metrics.provenance)) == metrics.provenance  # plain JSON data


def test_only_the_roles_the_call_computed_are_named_and_a_call_without_advantages_has_none():
    config = AlgorithmConfig(estimator="rloo", estimator_map={"judge": "median_baseline"})
    metrics = collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], config)
    assert list(metrics.provenance["estimators"]) == ["solver"] and metrics.provenance_line.startswith("rloo [built-in]; ")
    rewards_only = collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], config, collect_advantage=False)
    assert rewards_only.provenance is None and rewards_only.provenance_line is None


def test_user_code_and_options_of_any_type_give_one_stable_line():
    @register_rllm_adv_estimator("mine_for_provenance")
    def mine(rewards, **kwargs):
        return [r - r.mean() for r in rewards], [r - r.mean() for r in rewards]

    try:
        estimator = get_estimator("mine_for_provenance")
        options = {"z": np.float32(0.5), "a": (1, np.int64(2)), "b": np.bool_(True), "inf": float("inf"), "norm_adv_by_std_in_grpo": True}
        record = provenance({"solver": estimator}, (), options)
        line = provenance_line(record)
        assert re.fullmatch(
            r'mine_for_provenance \[user code .*mine\]; options \{"a":\[1,2\],"b":true,"inf":"inf","norm_adv_by_std_in_grpo":true,"z":0.5\}; '
            r"transforms none; rllm-plugins .+",
            line,
        )
        assert provenance_line(provenance({"solver": estimator}, (), dict(reversed(list(options.items()))))) == line  # order does not matter
        assert record["estimators"]["solver"]["source"] == "user" and record["estimators"]["solver"]["version"] is None
    finally:
        unregister_rllm_adv_estimator("mine_for_provenance")


def test_changed_code_names_both_versions_and_is_silent_for_the_same_code():
    was = {"source": "plugin", "plugin": "p", "distribution": PLUGIN, "version": "0.1.0", "rllm_plugins": "0.1.0"}
    now = {**was, "version": "0.2.0"}
    assert changed_code("p", was, dict(was), "f.json") is None
    assert changed_code("p", was, {**was, "rllm_plugins": "9.9"}, "f.json") is None  # a plugin's code is its own version
    message = changed_code("p", was, now, "f.json")
    assert f"plugin 'p' of {PLUGIN} 0.1.0 (rllm-plugins 0.1.0), and plugin 'p' of {PLUGIN} 0.2.0 (rllm-plugins 0.1.0) runs now" in message


def test_a_state_file_round_trip_records_the_code_and_a_changed_version_warns_once(tmp_path):
    config = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], config)
    path = tmp_path / "state.json"
    path.write_text(config.estimator_state.to_json())
    saved = json.loads(path.read_text())
    assert saved["provenance"]["rae"] == {
        "source": "built-in",
        "plugin": "builtin",
        "distribution": "rllm-plugins",
        "version": package_version(),
        "rllm_plugins": package_version(),
    }

    saved["provenance"]["rae"]["version"] = "0.0.1"  # as an older release wrote it
    path.write_text(json.dumps(saved))
    resumed = AlgorithmConfig(estimator="rae", estimator_kwargs={"decay": 0.5})
    resumed.estimator_state.load_state_dict(json.loads(path.read_text()), source=str(path))
    now = re.escape(package_version())
    said = rf"the state {re.escape(str(path))} was made by the built-in of rllm-plugins 0\.0\.1, and the built-in of rllm-plugins {now} runs now"
    with pytest.warns(RuntimeWarning, match=said):
        collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], resumed)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per load
        collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], resumed)
    assert resumed.state_dict()["provenance"]["rae"]["version"] == package_version()


def test_a_file_without_provenance_loads_and_warns_nothing():
    import warnings

    config = AlgorithmConfig(estimator="rae")
    config.load_state_dict({"format": 2, "estimators": {"rae": {"solver": {"baseline": 0.5}}}, "options": {"rae": {"decay": 0.95, "key_by": "role"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        collect_reward_and_advantage_from_trajectory_groups([group("q", "solver", [1.0, 0.0])], config)


def section_python() -> str:
    text = PAGE.read_text().split("## Which code computed these advantages", 1)[1]
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_architecture_pages_snippet_runs_and_prints_what_it_says(capsys):
    exec(compile(section_python(), "docs/architecture.md", "exec"), {})
    line, estimator = capsys.readouterr().out.splitlines()
    assert line == f'rloo [built-in]; options {{"norm_adv_by_std_in_grpo":true}}; transforms clip{{"max":2.0}} [built-in]; rllm-plugins {package_version()}'
    assert estimator.startswith("{'name': 'rloo', 'source': 'built-in', 'plugin': 'builtin', 'distribution': 'rllm-plugins', ")
