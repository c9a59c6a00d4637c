"""The one path from Hydra overrides to a validated :class:`RunConfig`: compose, check keys, validate.

``load(overrides)`` is what ``run``, ``bench``, ``validate``, the Python API and the tests call.
A validated config is kept per composed content for the life of the process, so a job that
the command line checked before Hydra started is not validated again inside the Hydra task
(the task's composed config is the same content); its warnings are replayed on every use.
"""

from __future__ import annotations

import collections
import copy
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from lbm.config.checks import CONFIG_DIR, did_you_mean, group_options
from lbm.config.run import LbmWarning, RunConfig, validate
from lbm.errors import ConfigError, LbmError

CACHE_SIZE = 8192
"""Validated configs kept per process (a prevalidated multirun holds at most 4096 jobs)."""

_validated: collections.OrderedDict[str, tuple[RunConfig, tuple[str, ...]]] = collections.OrderedDict()


def compose(overrides: Sequence[str], config_name: str = "config", command: str = "run") -> dict[str, Any]:
    """The resolved, key-checked config ``config_name`` (without Hydra's own node) for a list of overrides."""
    from lbm.config.schema import check_keys

    cfg, choices = _compose(list(overrides), config_name)
    check_keys(cfg, config_name, choices, command)
    return cfg


def load(overrides: Sequence[str]) -> RunConfig:
    """The validated run configuration for a list of Hydra overrides (as on the command line)."""
    cfg, choices = _compose(list(overrides), "config")
    return from_composed(cfg, choices)


def from_composed(cfg: Mapping[str, Any], choices: Mapping[str, str] | None = None) -> RunConfig:
    """The validated RunConfig of a composed run config (validated once per content and process)."""
    from lbm.config.schema import check_keys

    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _validated:
        check_keys(cfg, "config", choices)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LbmWarning)
            run = validate(cfg)
        _validated[key] = (run, tuple(str(w.message) for w in caught if issubclass(w.category, LbmWarning)))
        while len(_validated) > CACHE_SIZE:
            _validated.popitem(last=False)
    run, messages = _validated[key]
    _validated.move_to_end(key)
    for message in messages:
        warnings.warn(message, LbmWarning, stacklevel=2)
    return run


def _compose(overrides: list[str], config_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Hydra's composition with its errors as one line; returns (config, the group choices)."""
    from lbm.config.schema import register

    register()
    _check_literal_bools(overrides, config_name)
    cached = _compose_from_groups(overrides, config_name)
    if cached is not None:
        return _finished(cached)
    for _ in range(len(overrides) + 1):
        try:
            return _finished(_hydra_compose(overrides, config_name))
        except Exception as exc:  # Hydra/OmegaConf composition errors: one line naming the key and the fix
            retry = _unknown_key_retry(exc, overrides)
            if retry is None:
                raise translate(exc, config_name) from None
            overrides = retry
    raise AssertionError("unreachable: every retry adds a '+' to one more override")


def _hydra_compose(overrides: list[str], config_name: str) -> Any:
    """Hydra's composed config (an OmegaConf DictConfig, its ``hydra`` node included, unresolved)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name=config_name):
            return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _finished(cfg: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """(the resolved config without Hydra's node, the group choices) of a composed DictConfig (changed in place)."""
    from omegaconf import OmegaConf, open_dict

    choices = {k: v for k, v in cfg.hydra.runtime.choices.items() if "/" not in k and isinstance(v, str)}
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=True), choices  # type: ignore[return-value]


GROUP_CACHE_SIZE = 64
"""Compositions of group overrides kept per process (:func:`_compose_from_groups`)."""

_by_groups: collections.OrderedDict[tuple[str, tuple[str, ...]], Any] = collections.OrderedDict()


def _compose_from_groups(overrides: list[str], config_name: str) -> Any:
    """The composed config of ``overrides`` from Hydra's composition of their group overrides alone (kept per process)
    and Hydra's own application of the others (``key=value``, ``+key=value``, ``++key=value``, ``~key``), as Hydra
    applies them after the defaults list; None where that does not hold (a sweep, a package, an interpolation) or
    anything fails: then Hydra composes the whole list, and its error is the one reported.

    A composition costs ~80 ms of CPU, mostly building the defaults list and merging its YAML files; the same
    groups with other values (a sweep's prevalidation, ``bench``'s configurations, the test suite) reuse it."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        groups, values = [], []
        for o in parsed:
            if o.is_sweep_override() or o.package is not None or "${" in (o.input_line or ""):
                return None
            key = o.key_or_group
            is_group = "/" in key or (CONFIG_DIR / key).is_dir()
            (groups if is_group else values).append(o)
        key = (config_name, tuple(o.input_line or "" for o in groups))
        if key not in _by_groups:
            _by_groups[key] = _hydra_compose([o.input_line for o in groups], config_name)
            while len(_by_groups) > GROUP_CACHE_SIZE:
                _by_groups.popitem(last=False)
        _by_groups.move_to_end(key)
        cfg = copy.deepcopy(_by_groups[key])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        return cfg
    except Exception:  # Hydra's whole composition gives the result or the error
        return None


def _check_literal_bools(overrides: list[str], config_name: str) -> None:
    """Refuse a number given to a true/false key (OmegaConf would read ``native.pinning=3`` as true)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from lbm.config.schema import SCHEMAS, field_type

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # a syntax error: Hydra's composition names it
    for o in parsed:
        if o.is_delete() or o.is_sweep_override() or o.key_or_group.startswith("hydra."):
            continue
        value = o.value()
        if field_type(SCHEMAS[config_name], o.key_or_group) is bool and not isinstance(value, bool | None):
            raise ConfigError(o.key_or_group, o.get_value_element_as_str(), "true or false")


def _unknown_key_retry(exc: Exception, overrides: list[str]) -> list[str] | None:
    """For Hydra's "Could not override 'k'": the overrides with ``+k=...`` (so check_keys names the key and its
    alternatives), else None."""
    first = str(exc).split("\n", 1)[0]
    if not first.startswith("Could not override '"):
        return None
    key = first.split("'")[1]
    if key.startswith("hydra."):
        return None
    for i, o in enumerate(overrides):
        if o.split("=", 1)[0] == key:
            return [*overrides[:i], "+" + o, *overrides[i + 1:]]
    return None


def translate(exc: Exception, config_name: str = "config") -> LbmError:
    """One-line LbmError for a Hydra/OmegaConf composition error of the config ``config_name``."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ValidationError

    from lbm.config.schema import SCHEMAS, describe, field_type

    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and first.startswith("Error merging override "):
        key, _, value = first.removeprefix("Error merging override ").partition("=")
        key = getattr(cause, "full_key", None) or key.lstrip("+~")
        tp = field_type(SCHEMAS[config_name], key)
        return ConfigError(key, value, describe(tp) if tp is not None else "a value of the right type")
    missing = re.search(r"Could not (?:find|load) '([^']+)/([^'/]+)'", first)
    if isinstance(exc, MissingConfigException) and missing:
        group, option = missing.groups()
        if group_options(group):
            mean = did_you_mean(option, group_options(group))
            return LbmError(f"{group}={option} is not known{mean}: choose one of {', '.join(group_options(group))}")
    if first.startswith("Could not override 'hydra."):
        return LbmError(f"{first.split(chr(39))[1]} is not a Hydra setting (--cfg hydra lists them)")
    return LbmError(f"bad override: {first}")
