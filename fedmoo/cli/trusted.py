"""No foreign code from a config: what Hydra would instantiate or call is checked on the very
configuration it will use, before it uses it.

Hydra instantiates ``hydra.launcher``, ``hydra.sweeper`` and ``hydra.callbacks.*`` (their
``_target_``) and hands ``hydra.job_logging`` / ``hydra.hydra_logging`` to
``logging.config.dictConfig``; any of them can come from a config folder, not only from an
override. ``CheckedLoader`` wraps the config loader fedmoo hands to Hydra, so every configuration
it composes that names anything else is refused (``Refused``, exit status 2) before it is used.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_loader import ConfigLoader

from fedmoo.errors import Refused

# Classes Hydra may instantiate for a fedmoo run, by exact name: fedmoo's own callbacks, Hydra's
# defaults and the launcher plugins docs/scaling.md documents (and the declared plugins' classes).
ALLOWED_TARGETS = (
    "fedmoo.cli.precheck.CheckConfig",
    "fedmoo.run.callbacks.SweepReport",
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    "hydra_plugins.fedmoo_lockstep_launcher.lockstep_launcher.LockstepLauncher",
    "hydra_plugins.fedmoo_lockstep_launcher.grid_sweeper.GridSweeper",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher",
)


# Settings that make a job's processes run commands or load code: its environment (PYTHONPATH
# with a sitecustomize.py, LD_PRELOAD, PATH), submitit's shell lines and srun / sbatch flags,
# Ray's runtime environments (pip, setup hooks) and the cluster it joins (a Ray client unpickles
# what the server sends). Only the command line may set them: a value a config file sets is
# refused (per entry of a mapping: True). None has a value in fedmoo's own configs.
COMMAND_LINE_ONLY = {"hydra.job.env_set": True, "hydra.launcher.additional_parameters": True,
                     "hydra.launcher.setup": False, "hydra.launcher.srun_args": False,
                     "hydra.launcher.ray.init.address": False,
                     "hydra.launcher.ray.init.runtime_env": True,
                     "hydra.launcher.ray.remote.runtime_env": True}


def target_allowed(target: str) -> bool:
    """On ALLOWED_TARGETS, or ``module.Name`` of a class or function that a declared plugin's
    package (fedmoo.plugins) defines. Not a name a module only imports: Hydra follows every dot,
    so a package prefix alone would pass ``myproj.os.remove`` or ``fedmoo.logs.os.makedirs``."""
    import importlib

    from fedmoo.config import plugins

    if target in ALLOWED_TARGETS:
        return True
    module, _, name = target.rpartition(".")
    package = target.partition(".")[0]
    if package not in plugins.names() or not module:
        return False
    try:
        found = getattr(importlib.import_module(module), name)
    except (Exception, SystemExit):   # noqa: BLE001 - a plugin module that fails: not allowed
        return False
    home = getattr(found, "__module__", None) or ""
    return callable(found) and (home == package or home.startswith(package + "."))


def check(config: Any) -> Any:
    """``config``, or ``Refused`` (one line) when the composed configuration ``config`` (with its
    ``hydra`` node) would run code fedmoo does not allow."""
    from omegaconf import OmegaConf

    from fedmoo import logs

    hydra = OmegaConf.select(config, "hydra")
    if hydra is None:
        return config
    for part in ("job_logging", "hydra_logging"):
        node = hydra.get(part)
        if bad := logs.check_config(OmegaConf.to_container(node) if node is not None else {},
                                    f"hydra.{part}"):
            raise Refused(bad)
    def raw(key: str) -> Any:         # as written: an ${oc.env:...} in it is left to the run
        node = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
        return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node

    given = {str(o).partition("=")[0].lstrip("+~") for part in ("hydra", "task")
             for o in raw(f"hydra.overrides.{part}") or ()}
    for key, per_entry in COMMAND_LINE_ONLY.items():
        value = raw(key)
        names = [f"{key}.{k}" for k in value] if per_entry and value else [key] if value else []
        for name in names:
            if key not in given and name not in given:
                raise Refused(f"{name} is set by a config file; fedmoo takes it only from the "
                              "command line (it can make the job run other code: PYTHONPATH, "
                              "LD_PRELOAD, shell lines); give it there or in your shell")
    for part in ("launcher", "sweeper", "callbacks"):
        # instantiate is recursive: a _target_ nested anywhere in these nodes is called too
        node = hydra.get(part)
        tree = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
        for key, target in _targets(tree, f"hydra.{part}"):
            if not target_allowed(str(target)):
                raise Refused(f"{key}._target_={target} is not a launcher, sweeper or callback "
                              "fedmoo allows (it would run that code); use "
                              "hydra/launcher=local_gpus|slurm|ray or Hydra's defaults "
                              "(docs/scaling.md)")
    return config


def _targets(node: Any, key: str):
    """(dotted key, value) of every ``_target_`` in the plain tree ``node``."""
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        if k == "_target_":
            yield key, v
        else:
            yield from _targets(v, f"{key}.{k}")


class LoaderProxy:
    """Hydra's config loader ``loader``, each attribute not defined here handed to it: a base for
    loaders that add to Hydra's (Hydra calls them through ConfigLoader's methods only)."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "loader":   # unpickling looks up before __dict__
            raise AttributeError(name)
        return getattr(self.loader, name)


class CheckedLoader(LoaderProxy):
    """Hydra's config loader, each configuration it composes checked (``check``). Launchers in
    other processes (joblib, submitit) get it pickled and check their jobs there too."""

    def load_configuration(self, *args: Any, **kwargs: Any) -> Any:
        return check(self.loader.load_configuration(*args, **kwargs))

    def load_sweep_config(self, master_config: Any, sweep_overrides: list[str]) -> Any:
        return check(self.loader.load_sweep_config(master_config, sweep_overrides))
