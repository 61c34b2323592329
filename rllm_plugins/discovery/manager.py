"""Plugin discovery: one pluggy manager, built lazily, that knows where every estimator came from.

Built-ins register first, then every entry point of the group ``rllm_plugins`` is loaded by
our own loop, so that a broken plugin is skipped with a warning naming it (or raises under
``RLLM_PLUGINS_STRICT=1``), ``RLLM_PLUGINS_DISABLE=a,b`` blocks entry points by name, and two
plugins offering one name become a conflict that is reported when the name is used.

It is also the one home of the user-code registrations (``@register_rllm_adv_estimator`` outside
a plugin), which win over built-ins and plugins; :mod:`rllm_plugins.registry` is the public face of it all.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pluggy

from ..shaper_spec import Shaper, ShaperSpec
from ..spec import AdvEstimatorSpec, Estimator, Provider
from ..transform_spec import Transform, TransformSpec
from . import hookspecs

__all__ = [
    "ENTRY_POINT_GROUP",
    "Estimator",
    "PluginLoadError",
    "PluginRecord",
    "PluginState",
    "Provider",
    "add_user_estimator",
    "claim_user_registrations",
    "entry_points",
    "loading_provider",
    "plugin_state",
    "remove_user_estimator",
    "reset_plugins",
    "strict",
    "user_estimator",
    "user_overrides",
]

ENTRY_POINT_GROUP = hookspecs.PROJECT
BUILTIN_PLUGIN = "rllm_plugins.estimators.builtin"
BUILTIN_TRANSFORMS = "rllm_plugins.transforms.builtin"
BUILTIN_SHAPERS = "rllm_plugins.shaping.builtin"
HOOKS = ("rllm_adv_estimators", "rllm_advantage_transforms", "rllm_reward_shapers")
STRICT_ENV = "RLLM_PLUGINS_STRICT"
DISABLE_ENV = "RLLM_PLUGINS_DISABLE"

Status = Literal["active", "disabled", "error", "conflict"]


class PluginLoadError(RuntimeError):
    """A plugin failed to load while ``RLLM_PLUGINS_STRICT=1``."""


@dataclass
class PluginRecord:
    """One entry point of the group ``rllm_plugins`` (or the built-ins) and what became of it."""

    name: str
    distribution: str | None
    version: str | None
    status: Status = "active"
    estimators: list[str] = field(default_factory=list)
    error: str | None = None
    transforms: list[str] = field(default_factory=list)
    shapers: list[str] = field(default_factory=list)

    @property
    def provider(self) -> Provider:
        kind: Literal["builtin", "plugin"] = "builtin" if self.name == "builtin" else "plugin"
        return Provider(self.name, self.distribution, self.version, kind=kind)

    def why_unavailable(self) -> str | None:
        """Why this plugin offers nothing (it failed to load, or is disabled), naming it and its distribution; else None."""
        if self.status == "error":
            return f"{self.provider} failed to load: {self.error}"
        if self.status == "disabled":
            return f"{self.provider} is disabled by {DISABLE_ENV}"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "estimators": list(self.estimators),
            "transforms": list(self.transforms),
            "shapers": list(self.shapers),
            "error": self.error,
        }


@dataclass
class PluginState:
    """The loaded plugin manager: estimators, transforms and reward shapers by name, conflicting names, and one record per plugin."""

    manager: pluggy.PluginManager
    records: list[PluginRecord]
    estimators: dict[str, Estimator]
    conflicts: dict[str, list[Provider]]
    transforms: dict[str, Transform] = field(default_factory=dict)
    transform_conflicts: dict[str, list[Provider]] = field(default_factory=dict)
    shapers: dict[str, Shaper] = field(default_factory=dict)
    shaper_conflicts: dict[str, list[Provider]] = field(default_factory=dict)


_lock = threading.RLock()
_state: PluginState | None = None
_local = threading.local()  # .provider / .captured while an entry point is being imported


def loading_provider() -> Provider | None:
    """The plugin whose entry point this thread is importing, if any."""
    return getattr(_local, "provider", None)


def capture(spec: AdvEstimatorSpec | TransformSpec | ShaperSpec) -> None:
    """Record a decorator registration made while a plugin module imports (rLLM's legacy style)."""
    _local.captured.append(spec)


@contextlib.contextmanager
def _importing(provider: Provider) -> Iterator[list[AdvEstimatorSpec | TransformSpec | ShaperSpec]]:
    _local.provider, _local.captured = provider, []
    try:
        yield _local.captured
    finally:
        _local.provider = None


# --- user-code registrations: they win over built-ins and plugins ---------------------------

_user_lock = threading.Lock()
_user: dict[str, Estimator] = {}


def add_user_estimator(estimator: Estimator) -> list[tuple[str, Estimator]]:
    """Register ``estimator`` (from user code) under each of its names; returns the ``(name, previous)`` it overrides.

    Never starts discovery (this may run inside a plugin's import): ``previous`` is a user-code
    registration, a built-in, or a plugin's estimator once plugins are loaded.
    """
    loaded = loaded_estimators()
    overridden = []
    with _user_lock:
        for name in estimator.spec.names:
            previous = _user.get(name) or loaded.get(name)
            if previous is not None and previous.spec.fn is not estimator.spec.fn:
                overridden.append((name, previous))
            _user[name] = estimator
    return overridden


def remove_user_estimator(name: str) -> bool:
    """Remove the user-code registration of ``name`` and its aliases; False if user code registered no ``name``."""
    with _user_lock:
        estimator = _user.get(name)
        if estimator is None:
            return False
        for n in estimator.spec.names:
            _user.pop(n, None)
    return True


def user_estimator(name: str) -> Estimator | None:
    """The user-code registration of ``name``, if any."""
    return _user.get(name)


def user_overrides() -> dict[str, Estimator]:
    """The user-code registrations by name."""
    return dict(_user)


def claim_user_registrations(module: str) -> list[AdvEstimatorSpec]:
    """Remove and return the user-code registrations made by functions of ``module``.

    A decorator-only plugin module imported by user code before discovery registered as user
    code; when its entry point is loaded, the plugin claims them back.
    """
    with _user_lock:
        claimed = {n: e for n, e in _user.items() if getattr(e.spec.fn, "__module__", None) == module}
        for n in claimed:
            del _user[n]
    return list({id(e.spec): e.spec for e in claimed.values()}.values())


# --- discovery -------------------------------------------------------------------------------


def loaded_estimators() -> dict[str, Estimator]:
    """Estimators known so far without starting discovery: the built-ins, plus plugins once loaded."""
    state = _state
    return dict(state.estimators) if state is not None else {n: Estimator(s, _builtin_provider()) for s in builtin_specs() for n in s.names}


def plugin_state() -> PluginState:
    """The plugin manager's state, built on first use (thread-safe)."""
    global _state
    state = _state
    if state is not None:
        return state
    with _lock:
        if _state is None:
            if getattr(_local, "building", False):  # a plugin looks names up while it imports
                return _builtin_state()
            _local.building = True
            try:
                _state = _build()
            finally:
                _local.building = False
        return _state


def reset_plugins() -> None:
    """Forget the loaded plugins; the next lookup discovers entry points again (for tests)."""
    global _state
    with _lock:
        _state = None


def builtin_plugin() -> ModuleType:
    """The built-in estimators' plugin module, imported by name as pytest imports its default plugins.

    The estimators sit above this layer (``composite`` looks its terms up in the registry), so the
    manager names the module rather than importing it.
    """
    return importlib.import_module(BUILTIN_PLUGIN)


def builtin_specs() -> list[AdvEstimatorSpec]:
    return list(builtin_plugin().rllm_adv_estimators())


def builtin_transforms_plugin() -> ModuleType:
    """The built-in transforms' plugin module (named, not imported: the transforms sit above this layer)."""
    return importlib.import_module(BUILTIN_TRANSFORMS)


def builtin_transform_specs() -> list[TransformSpec]:
    return list(builtin_transforms_plugin().rllm_advantage_transforms())


def builtin_shapers_plugin() -> ModuleType:
    """The built-in reward shapers' plugin module (named, not imported: the shapers sit above this layer)."""
    return importlib.import_module(BUILTIN_SHAPERS)


def builtin_shaper_specs() -> list[ShaperSpec]:
    return list(builtin_shapers_plugin().rllm_reward_shapers())


def _builtin_provider() -> Provider:
    try:
        version: str | None = metadata.version("rllm-plugins")
    except metadata.PackageNotFoundError:
        version = None
    return Provider("builtin", "rllm-plugins", version, kind="builtin")


def _builtin_state() -> PluginState:
    provider = _builtin_provider()
    specs = list(builtin_specs())
    estimators = {n: Estimator(s, provider) for s in specs for n in s.names}
    transform_specs, shaper_specs = builtin_transform_specs(), builtin_shaper_specs()
    record = PluginRecord(
        "builtin", provider.distribution, provider.version, estimators=[s.name for s in specs], transforms=[s.name for s in transform_specs],
        shapers=[s.name for s in shaper_specs],
    )  # fmt: skip
    transforms = {s.name: Transform(s, provider) for s in transform_specs}
    shapers = {s.name: Shaper(s, provider) for s in shaper_specs}
    return PluginState(pluggy.PluginManager(hookspecs.PROJECT), [record], estimators, {}, transforms, shapers=shapers)


def _scan(group: str) -> list[tuple[metadata.EntryPoint, str | None, str | None]]:
    """:func:`entry_points` with each one's distribution name and version (its metadata parsed once, not per use)."""
    seen: set[tuple[str | None, str, str]] = set()
    unique = []
    for ep in metadata.entry_points(group=group):
        meta = None if ep.dist is None else ep.dist.metadata  # Distribution.name and .version parse the file again each time
        name, version = (None, None) if meta is None else (meta["Name"], meta["Version"])
        key = (name, ep.name, ep.value)
        if key not in seen:  # the same distribution found twice on sys.path
            seen.add(key)
            unique.append((ep, name, version))
    return sorted(unique, key=lambda found: (found[0].name, found[1] or ""))


def entry_points(group: str = ENTRY_POINT_GROUP) -> list[metadata.EntryPoint]:
    """The entry points of ``group``, each once (a distribution may be found twice on ``sys.path``), sorted by name."""
    return [ep for ep, _, _ in _scan(group)]


def _env_list(name: str) -> set[str]:
    return {item.strip() for item in os.environ.get(name, "").split(",") if item.strip()}


def strict() -> bool:
    """Whether ``RLLM_PLUGINS_STRICT`` is set (a plugin that fails to load raises instead of being skipped)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _specs_of(manager: pluggy.PluginManager, plugin_name: str, hook: str = "rllm_adv_estimators") -> list[Any]:
    """Call one plugin's implementation of ``hook`` and check what it returns (estimator, transform or shaper specs)."""
    kind = {"rllm_adv_estimators": AdvEstimatorSpec, "rllm_advantage_transforms": TransformSpec, "rllm_reward_shapers": ShaperSpec}[hook]
    specs: list[Any] = []
    for impl in getattr(manager.hook, hook).get_hookimpls():
        if impl.plugin_name != plugin_name:
            continue
        result = impl.function()
        for spec in [] if result is None else result:
            if not isinstance(spec, kind):
                raise TypeError(f"{hook}() must yield {kind.__name__} objects, got {type(spec).__name__}: {spec!r} (from {_defined_at(impl.function)})")
            specs.append(spec)
    return specs


def _defined_at(fn: Callable[..., Any]) -> str:
    """``file:line`` where ``fn`` is defined (its name when that is unknown)."""
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(fn)


def _check_implements_the_hook(manager: pluggy.PluginManager, plugin: object, module: str) -> None:
    """A plugin that registered no estimator with the decorator must implement ``rllm_adv_estimators`` (a typo in the name is no hook)."""
    callers = manager.get_hookcallers(plugin) or []
    if any(caller.name in HOOKS for caller in callers):
        return
    others = [f"{caller.name} (at {_defined_at(impl.function)})" for caller in callers for impl in caller.get_hookimpls() if impl.plugin is plugin]
    import difflib  # only on this error path

    meant = difflib.get_close_matches(callers[0].name, HOOKS, n=1, cutoff=0.0)[0] if others else HOOKS[0]
    hint = f"; its @hookimpl {', '.join(others)} is no rllm-plugins hook: the hook is {meant}" if others else ""
    raise TypeError(f"{module!r} offers no estimators: it has no @hookimpl rllm_adv_estimators() and registers none with @register_rllm_adv_estimator{hint}")


def _check_distinct_names(specs: list[AdvEstimatorSpec], module: str) -> None:
    """One plugin must not offer a name twice (two specs, or a spec's alias that is another's name): which one wins would be a guess."""
    owner: dict[str, str] = {}
    for spec in specs:
        for name in spec.names:
            if name in owner:
                raise ValueError(
                    f"{module!r} offers the estimator name {name!r} twice (estimators {owner[name]!r} and {spec.name!r}); "
                    "give each estimator its own name and aliases"
                )
            owner[name] = spec.name


def _load_entry_point(
    manager: pluggy.PluginManager, ep: metadata.EntryPoint, provider: Provider
) -> tuple[list[AdvEstimatorSpec], list[TransformSpec], list[ShaperSpec]]:
    with _importing(provider) as captured:
        plugin = ep.load()
    if not captured:  # a decorator-only module that user code imported before discovery
        captured.extend(claim_user_registrations(ep.module))
    registered = f"{provider.distribution}:{ep.name}"
    manager.register(plugin, name=registered)
    try:
        if not captured:
            _check_implements_the_hook(manager, plugin, ep.value)
        specs = [s for s in captured if isinstance(s, AdvEstimatorSpec)] + _specs_of(manager, registered)
        transforms = [s for s in captured if isinstance(s, TransformSpec)] + _specs_of(manager, registered, "rllm_advantage_transforms")
        shapers = [s for s in captured if isinstance(s, ShaperSpec)] + _specs_of(manager, registered, "rllm_reward_shapers")
        _check_distinct_names(specs, ep.value)
        _check_distinct_kind_names(transforms, ep.value, "transform")
        _check_distinct_kind_names(shapers, ep.value, "reward shaper")
        return specs, transforms, shapers
    except Exception:
        manager.unregister(name=registered)
        raise


def _check_distinct_kind_names(specs: list[TransformSpec] | list[ShaperSpec], module: str, kind: str) -> None:
    """One plugin must not offer a transform (or reward shaper) name twice."""
    names = [spec.name for spec in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{module!r} offers the {kind} name(s) {twice} twice; give each {kind} its own name")


Offers = dict[str, list[tuple[Any, Provider, PluginRecord]]]  # name -> (spec, provider, record) of each plugin that offers it


def _settle(offers: Offers, kind: str, wrap: Callable[[Any, Provider], Any]) -> tuple[dict[str, Any], dict[str, list[Provider]]]:
    """The names ``offers`` makes selectable (one provider each, wrapped) and the conflicting ones (several providers)."""
    chosen: dict[str, Any] = {}
    conflicts: dict[str, list[Provider]] = {}
    for name, offered in offers.items():
        providers = list(dict.fromkeys(p for _, p, _ in offered))
        if len(providers) == 1:
            chosen[name] = wrap(offered[0][0], providers[0])
            continue
        conflicts[name] = providers
        for _, _, record in offered:
            record.status = "conflict"
            record.error = f"{kind} {name!r} is also offered by " + ", ".join(str(p) for p in providers if p.plugin != record.name)
    return chosen, conflicts


def _offer(offers: Offers, specs: list[Any], names: list[str], builtin: set[str], kind: str, provider: Provider, record: PluginRecord) -> None:
    """Add a plugin's transforms or shapers to ``offers`` (their names to ``names``); a built-in name is refused with a warning."""
    for spec in specs:
        names.append(spec.name)
        if spec.name in builtin:
            record.status = "conflict"
            record.error = f"{spec.name!r} is a built-in {kind} name and cannot be taken by a plugin"
            warnings.warn(f"rllm_plugins: {provider} offers the {kind} {spec.name!r}, a built-in name; its version is ignored", RuntimeWarning, stacklevel=3)
            continue
        offers.setdefault(spec.name, []).append((spec, provider, record))


def _plugin_location(error: BaseException, ep: metadata.EntryPoint) -> str | None:
    """``file:line`` where the plugin's own code failed: the innermost traceback frame in its distribution or package."""
    top = ep.module.split(".")[0]
    files = {str(Path(str(ep.dist.locate_file(f))).resolve()) for f in ep.dist.files or () if f.suffix == ".py"} if ep.dist else set()

    def in_plugin(filename: str) -> bool:
        path = Path(filename)
        return top in path.parts[:-1] or path.name == f"{top}.py" or str(path.resolve()) in files

    if isinstance(error, SyntaxError) and error.filename and in_plugin(error.filename):
        return f"{error.filename}:{error.lineno}"
    import traceback  # only on this error path

    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if in_plugin(frame.filename)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _build() -> PluginState:
    state = _builtin_state()
    manager, records = state.manager, state.records
    manager.add_hookspecs(hookspecs)
    manager.register(builtin_plugin(), name="builtin")
    manager.register(builtin_transforms_plugin(), name="builtin_transforms")
    manager.register(builtin_shapers_plugin(), name="builtin_shapers")
    builtin_names = set(state.estimators)
    builtin_transform_names, builtin_shaper_names = set(state.transforms), set(state.shapers)
    transform_offers: Offers = {}
    shaper_offers: Offers = {}
    disabled, is_strict = _env_list(DISABLE_ENV), strict()

    offers: dict[str, list[tuple[AdvEstimatorSpec, Provider, PluginRecord]]] = {}
    installed = _scan(ENTRY_POINT_GROUP)
    _warn_unmatched_disable(disabled, [ep.name for ep, _, _ in installed])
    for ep, distribution, version in installed:
        provider = Provider(ep.name, distribution, version)
        record = PluginRecord(ep.name, provider.distribution, provider.version)
        records.append(record)
        if ep.name in disabled:
            record.status = "disabled"
            continue
        try:
            specs, transforms, shapers = _load_entry_point(manager, ep, provider)
        except Exception as e:
            location = _plugin_location(e, ep)
            message = f"{type(e).__name__}: {e}" + (f" (at {location})" if location else "")
            from .mistakes import target_mistake  # only on this error path

            mistake = target_mistake(e, ep)
            message += f"; {mistake}" if mistake else ""
            if is_strict:
                raise PluginLoadError(f"{provider} failed to load ({STRICT_ENV} is set): {message}") from e
            warnings.warn(
                f"rllm_plugins: skipping {provider}, which failed to load: {message}. Fix or uninstall it, or set {DISABLE_ENV}={ep.name} to silence this.",
                RuntimeWarning,
                stacklevel=2,
            )
            record.status, record.error = "error", message
            continue
        for spec in specs:
            record.estimators.append(spec.name)
            for name in spec.names:
                if name in builtin_names:
                    record.status = "conflict"
                    record.error = f"{name!r} is a built-in estimator name and cannot be taken by a plugin"
                    warnings.warn(f"rllm_plugins: {provider} offers {name!r}, a built-in name; its version is ignored", RuntimeWarning, stacklevel=2)
                    continue
                offers.setdefault(name, []).append((spec, provider, record))
        _offer(transform_offers, transforms, record.transforms, builtin_transform_names, "transform", provider, record)
        _offer(shaper_offers, shapers, record.shapers, builtin_shaper_names, "reward shaper", provider, record)

    conflicts: dict[str, list[Provider]] = {}
    for name, offered in offers.items():
        providers = list(dict.fromkeys(p for _, p, _ in offered))
        if len(providers) == 1:
            state.estimators[name] = Estimator(offered[0][0], providers[0])
            continue
        conflicts[name] = providers
        for _, _, record in offered:
            record.status = "conflict"
            record.error = f"{name!r} is also offered by " + ", ".join(str(p) for p in providers if p.plugin != record.name)
    state.conflicts = conflicts
    chosen, state.transform_conflicts = _settle(transform_offers, "transform", Transform)
    state.transforms.update(chosen)
    chosen, state.shaper_conflicts = _settle(shaper_offers, "reward shaper", Shaper)
    state.shapers.update(chosen)
    _warn_user_overrides(state)
    return state


def _warn_unmatched_disable(disabled: set[str], names: list[str]) -> None:
    """Names in ``RLLM_PLUGINS_DISABLE`` that are no installed entry point disable nothing: say so (a typo, or the wrong case)."""
    for name in sorted(disabled - set(names)):
        import difflib  # only on this warning path

        same = [n for n in names if n.lower() == name.lower()] or difflib.get_close_matches(name, names, n=1)
        hint = f" Did you mean {same[0]!r}?" if same else ""
        warnings.warn(
            f"rllm_plugins: {DISABLE_ENV} names {name!r}, which is no installed plugin's entry-point name, so it disables nothing.{hint} "
            f"Installed: {', '.join(names) if names else 'none'}",
            RuntimeWarning,
            stacklevel=3,
        )


def _warn_user_overrides(state: PluginState) -> None:
    """User code registered a name before discovery found a plugin offering it: say who wins."""
    for name, estimator in user_overrides().items():
        theirs = state.estimators.get(name)
        if theirs is not None and theirs.provider.kind == "plugin" and theirs.spec.fn is not estimator.spec.fn:
            warnings.warn(f"estimator {name!r} from {estimator.provider} overrides the one from {theirs.provider}", UserWarning, stacklevel=3)
