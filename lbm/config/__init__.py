"""Run configuration: Hydra overrides -> composed config -> checked keys -> validated :class:`RunConfig`.

- :func:`load` is the one path from overrides to a RunConfig (``run``, ``bench``, ``validate``, ``lbm.run``,
  tests); :func:`from_composed` is the same path for a config Hydra already composed (the Hydra task).
- :mod:`lbm.config.schema`: the dataclass schemas registered in Hydra's ConfigStore (types, known keys).
- :mod:`lbm.config.checks`: the value checks (type and range, one line naming the key).
- :mod:`lbm.config.run`: :class:`RunConfig`, the validation and the derived viscosity.

Nothing here imports the cases: the case names are the files of the config group ``case/``.
"""

from lbm.config.checks import CONFIG_DIR, check_bool, check_choice, check_float, check_int, group_options
from lbm.config.loader import compose, from_composed, load
from lbm.config.run import (
    ENGINES,
    MACH_MAX,
    MACH_WARN,
    MODES,
    PRECISIONS,
    PROFILE_BACKENDS,
    TAU_WARN,
    LbmWarning,
    RunConfig,
    check_output_every,
    validate,
    validate_checkpoint,
    validate_profile,
    viscosity,
)

__all__ = [
    "CONFIG_DIR", "ENGINES", "MACH_MAX", "MACH_WARN", "MODES", "PRECISIONS", "PROFILE_BACKENDS", "TAU_WARN",
    "LbmWarning", "RunConfig", "check_bool", "check_choice", "check_float", "check_int",
    "check_output_every", "compose", "from_composed", "group_options", "load", "validate",
    "validate_checkpoint", "validate_profile", "viscosity",
]
