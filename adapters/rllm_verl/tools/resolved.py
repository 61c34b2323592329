"""What ``verl-check`` resolved, and the ``algorithm`` settings that would be ignored or contradict each other.

- :func:`algorithm_key_problems`: every key under ``algorithm`` that neither verl (its ``ppo_trainer`` defaults) nor
  rllm-plugins reads is ignored in a run; a near miss of a known key (``rllm_estimator_kwarg``) is an error naming the
  closest, any other unknown key a warning. Keys inside ``rllm_estimator_kwargs`` are the estimator's options, checked
  against them (:func:`rllm_plugins.options.check_estimator_kwargs`, which names the closest option).
- :func:`resolve_options`: each option of the chosen estimator, its value and where it comes from. Two options are
  also read from verl's own fields (as :mod:`rllm_verl.compute.steps` reads them): ``gamma`` from ``algorithm.gamma``
  for a step-level estimator, ``lam`` from ``algorithm.lam`` for a value-based one; ``rllm_estimator_kwargs`` wins.
  Both set to different values (``algorithm.*`` off verl's default) is refused naming both, as the run refuses it
  (:func:`rllm_verl.compute.steps.given_twice`); a value outside the option's range is refused naming the
  field it came from.
- :func:`context_rows`: the verl version and how the ``rllm_*`` names get registered (as ``verl-check`` found them),
  the trainer path, the agent loop's class and file.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["algorithm_key_problems", "context_rows", "explicit_algorithm_keys", "resolve_options", "table_lines", "transform_rows"]

KWARGS = "rllm_estimator_kwargs"
TRANSFORMS = "rllm_advantage_transforms"  # rllm_verl.compute.transforms.CONFIG_KEY (not imported: that module imports torch)
SHAPERS = "rllm_reward_shapers"  # rllm_verl.compute.shaping.CONFIG_KEY
RLLM_ALGORITHM_KEYS = (KWARGS, TRANSFORMS, SHAPERS, "gdpo_reward_keys", "gdpo_reward_weights", "rllm_multi_objective_aggregation")
"""Keys under ``algorithm`` that rllm-plugins reads (and verl's ``gdpo``, for the two ``gdpo_*``) beyond verl's defaults."""
OPEN_KEYS = (KWARGS, TRANSFORMS, SHAPERS, "gdpo_reward_keys", "gdpo_reward_weights")  # their contents are checked elsewhere, or free


def _paths(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> value of every key under a mapping (nested mappings expanded, their own path kept too)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        out[path] = value
        if hasattr(value, "items") and str(key) not in OPEN_KEYS:
            out.update(_paths(value, f"{path}."))
    return out


def explicit_algorithm_keys(overrides: Sequence[str]) -> set[str]:
    """The ``algorithm.*`` keys the overrides set (``+``, ``++`` and ``~`` prefixes allowed), without ``algorithm.``."""
    keys = set()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key.startswith("algorithm."):
            keys.add(key.removeprefix("algorithm."))
    return keys


def algorithm_key_problems(algorithm: Any, defaults: Any) -> tuple[list[str], list[str]]:
    """Errors (near misses of a known key, with the closest) and warnings (other unknown keys) for ``algorithm``, against verl's
    ``defaults`` (the ``algorithm`` section of its ``ppo_trainer`` config) and :data:`RLLM_ALGORITHM_KEYS`."""
    from omegaconf import OmegaConf

    known = set(_paths(defaults)) | set(RLLM_ALGORITHM_KEYS)
    errors, warnings = [], []
    for path, value in _paths(algorithm).items():
        parent, _, key = path.rpartition(".")
        if path in known or (parent and parent not in known):  # known, or inside an unknown key (named once, at its top)
            continue
        siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent]
        close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.75)
        shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        where = f"algorithm.{path}={shown!r}"
        if close:
            fix = f"algorithm.{parent + '.' if parent else ''}{close[0]}"
            errors.append(f"{where}: no key verl or rllm-plugins reads, so a run would ignore it. Did you mean {fix}?")
        else:
            warnings.append(f"{where}: no key verl or rllm-plugins reads (a run ignores it, unless a plugin of your own reads it)")
    return errors, warnings


def _aliases(spec: Any) -> dict[str, str]:
    """Options the verl path also reads from ``algorithm.*`` (:mod:`rllm_verl.compute.steps`): option -> field."""
    out = {}
    if spec.level == "step":
        out["gamma"] = "algorithm.gamma"
    if spec.needs_values:
        out["lam"] = "algorithm.lam"
    return out


def resolve_options(
    name: str, estimator: Any, algorithm: Any, kwargs: Mapping[str, Any], explicit: set[str], defaults: Any
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``(option, value, source)`` for each option of ``estimator`` (selected as ``name``), and the errors: one option set twice to
    different values, or a value from ``algorithm.*`` outside the option's range. ``kwargs`` are the ``rllm_estimator_kwargs``,
    ``explicit`` the ``algorithm`` keys the user set (others hold verl's ``defaults``)."""
    from rllm_plugins.options import check_estimator_kwargs, spec_options
    from rllm_verl.compute.steps import given_twice

    spec = estimator.spec
    aliases = _aliases(spec)
    rows, errors = [], []
    read: dict[str, Any] = {}  # options taken from algorithm.*, checked with the kwargs below
    for option, default in spec_options(spec).defaults.items():
        field = aliases.get(option)
        from_algorithm = None if field is None else algorithm.get(option, None)
        set_by_user = field is not None and (option in explicit or from_algorithm != defaults.get(option, None))
        if option in kwargs:
            problem = given_twice(option, kwargs, algorithm)  # the run's own rule
            if problem is not None:
                errors.append(problem)
            rows.append((option, repr(kwargs[option]), f"algorithm.{KWARGS}.{option}"))
        elif from_algorithm is not None:
            read[option] = from_algorithm
            rows.append((option, repr(from_algorithm), field if set_by_user else f"{field}, verl's default"))
        else:
            value = "(none)" if default is inspect.Parameter.empty else repr(default)
            rows.append((option, value, "the estimator's default"))
    for option, value in read.items():  # each with the kwargs, whose own check already passed
        field = aliases[option]
        try:
            check_estimator_kwargs({name: estimator}, {**kwargs, option: value}, where=f"{field}={value!r}", norm_field="algorithm.norm_adv_by_std_in_grpo")
        except ValueError as error:
            errors.append(f"{error} ({name} reads {option} from {field} when algorithm.{KWARGS}.{option} is not set)")
    return rows, errors


def context_rows(config: Any, registration: str) -> list[tuple[str, str, str]]:
    """``(what, value, source)`` rows for the verl version and how the ``rllm_*`` names are registered (``registration``, from
    :mod:`rllm_verl.tools.check`), the trainer path and the agent loop."""
    import hydra.utils
    from omegaconf import OmegaConf

    from rllm_verl.tools.agent_loop import AGENT, _current_folder_importable, _defined_loops

    use_v1 = OmegaConf.select(config, "trainer.use_v1", default=False)
    trainer = "v1 (PPOTrainer, compute_advantage_for_multi_trajectories)" if use_v1 else "legacy (RayPPOTrainer, compute_advantage)"
    rows = [("verl", registration, "the installed distributions"), ("trainer path", trainer, f"trainer.use_v1={str(bool(use_v1)).lower()}")]
    name = str(OmegaConf.select(config, f"{AGENT}.default_agent_loop", default="single_turn_agent"))
    path = OmegaConf.select(config, f"{AGENT}.agent_loop_config_path", default=None)
    defined = _defined_loops(str(path))[0] if path else {}
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = defined.get(name) or _agent_loop_registry.get(name)
    if entry is not None:
        target = str(entry["_target_"])
        try:
            with _current_folder_importable():
                where = inspect.getsourcefile(hydra.utils.get_class(target)) or "?"
        except Exception:  # agent_loop_errors names it
            where = "?"
        source = f"{AGENT}.default_agent_loop" + (f" in {path}" if name in defined else ", verl's own")
        rows.append(("agent loop", f"{name!r}: {target} ({where})", source))
    return rows


def transform_rows(transforms: Sequence[Any], shapers: Sequence[Any] = ()) -> list[tuple[str, str, str]]:
    """``(what, value, source)`` for each selected reward shaper (``SelectedShaper``) and transform (``SelectedTransform``), in the
    order they run: its label, every option's value (given, else the default) and its provider."""
    from rllm_plugins.shaper_spec import shaper_options
    from rllm_plugins.transform_spec import transform_options

    def row(what: str, index: int, choice: Any, defaults: dict[str, Any], provider: Any, key: str) -> tuple[str, str, str]:
        options = {**defaults, **choice.options}
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if v is not inspect.Parameter.empty)
        return (f"{what} {index + 1}", f"{choice.label}({shown}) of {provider}", f"algorithm.{key}[{index}]")

    rows = [row("shaper", i, c, shaper_options(c.shaper.spec), c.shaper.provider, SHAPERS) for i, c in enumerate(shapers)]
    rows += [row("transform", i, c, transform_options(c.transform.spec), c.transform.provider, TRANSFORMS) for i, c in enumerate(transforms)]
    return rows


def table_lines(rows: Sequence[Sequence[str]]) -> list[str]:
    """The resolved rows, one a line: what, its value, where it came from."""
    if not rows:
        return []
    width = max(len(r[0]) for r in rows)
    return ["resolved:", *(f"  {r[0]:<{width}}  {r[1]}  (from {r[2]})" for r in rows)]
