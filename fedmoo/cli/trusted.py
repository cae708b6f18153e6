"""No foreign code from a config: what Hydra would instantiate or call is checked on the very
configuration it will use, before it uses it.

Hydra instantiates ``hydra.launcher``, ``hydra.sweeper`` and ``hydra.callbacks.*`` (their
``_target_``) and hands ``hydra.job_logging`` / ``hydra.hydra_logging`` to
``logging.config.dictConfig``; any of them can come from a config folder, not only from an
override. ``CheckedLoader`` wraps the config loader fedmoo hands to Hydra, so every configuration
it composes that names anything else is refused (``Refused``, exit status 2) before it is used,
and so is one where a config file sets what only the command line may (``COMMAND_LINE_ONLY``,
``_places``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
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
# The hydra nodes Hydra hands to code (instantiate, logging.config.dictConfig).
CHECKED = ("job_logging", "hydra_logging", "launcher", "sweeper", "callbacks")


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


def check(config: Any, overrides: list[str] | None = None) -> Any:
    """``config``, or ``Refused`` (one line) when the composed configuration ``config`` (with its
    ``hydra`` node; ``overrides``: those it was composed with) would run code fedmoo does not
    allow."""
    from omegaconf import OmegaConf

    from fedmoo import logs
    from fedmoo.run.gpu_lease import register_resolvers

    hydra = OmegaConf.select(config, "hydra")
    if hydra is None:
        return config
    register_resolvers()              # ${fedmoo.gpus:} resolves here as in the run
    for node, key, where in [*((hydra, part, f"hydra.{part}") for part in CHECKED),
                             (hydra.get("job"), "env_set", "hydra.job.env_set")]:
        if node is not None and key in node and (bad := _interpolated(node, key, where)):
            raise Refused(bad)
    for part in ("job_logging", "hydra_logging"):
        node = hydra.get(part)
        if bad := logs.check_config(OmegaConf.to_container(node) if node is not None else {},
                                    f"hydra.{part}"):
            raise Refused(bad)

    def raw(key: str) -> Any:
        node = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
        return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node

    written = [str(o) for part in ("task", "hydra") for o in raw(f"hydra.overrides.{part}") or ()]
    if overrides is not None and (extra := Counter(written) - Counter(map(str, overrides))):
        raise Refused(f"hydra.overrides holds {next(iter(extra))!r}, which the command line did "
                      "not give: a config file may not add overrides (docs/troubleshooting.md)")
    given = {o.partition("=")[0].lstrip("+~") for o in written}
    for key, per_entry in COMMAND_LINE_ONLY.items():
        value = raw(key)
        names = [f"{key}.{k}" for k in value] if per_entry and value else [key] if value else []
        for name in names:
            if key not in given and name not in given:
                raise Refused(f"{name} is set by a config file; fedmoo takes it only from the "
                              "command line (it can make the job run other code: PYTHONPATH, "
                              "LD_PRELOAD, shell lines); give it there or in your shell")
    if bad := _places(config, hydra, given):
        raise Refused(bad)
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


def _places(config: Any, hydra: Any, given: set[str]) -> str | None:
    """Why the files a run writes could land on or wipe files elsewhere, or None: Hydra's record
    folder (``hydra.output_subdir``), a job's folder (``hydra.sweep.subdir``) and the run log's
    name stay inside the run's folder; the run's folder is not inside a folder of configs (whose
    files, symlinks among them, are not the user's); discarding a result (``resume=false``) is
    the command line's choice, not a file's."""
    from omegaconf import OmegaConf

    def written(node: Any, key: str) -> Any:
        return node._get_node(key)._value() if node is not None and key in node else None

    for key, value in (("output_subdir", written(hydra, "output_subdir")),
                       ("job.name", written(hydra.get("job"), "name")),
                       ("sweep.subdir", written(hydra.get("sweep"), "subdir"))):
        text = str(value or "")
        job_keys = re.sub(r"\$\{hydra\.job\.(num|id|override_dirname)\}", "", text)
        if f"hydra.{key}" in given:
            continue                     # the user's own choice
        if text.startswith(("/", "~")) or ".." in text.split("/") or "${" in job_keys \
                or (key != "sweep.subdir" and "/" in text):
            return (f"hydra.{key}={value} could put fedmoo's files outside the run's folder; give "
                    "a name inside it (a config file cannot choose another place)")
    if OmegaConf.select(config, "resume", default=True) is False and "resume" not in given:
        return ("resume=false is set by a config file: it would discard a finished result; "
                "give resume=false on the command line to discard it")
    entries = OmegaConf.to_container(hydra.searchpath) if "searchpath" in hydra else []
    folders = [Path(e[len("file://"):]).resolve() for e in map(str, entries or ())
               if e.startswith("file://")]
    place = "sweep.dir" if str(written(hydra, "mode")) == "RunMode.MULTIRUN" else "run.dir"
    try:
        out = Path(str(OmegaConf.select(config, f"hydra.{place}"))).expanduser().resolve()
    except Exception:  # noqa: BLE001 - a folder not resolvable yet is the run's to refuse
        return None
    inside = next((f for f in folders if out == f or f in out.parents), None)
    if inside is not None:
        return (f"hydra.{place}={out} is inside the config folder {inside}: results go elsewhere "
                "(its files are not yours to overwrite); set another hydra.run.dir / "
                "hydra.sweep.dir")
    return None


def _interpolated(node: Any, key: Any, where: str) -> str | None:
    """Why ``node[key]`` (and what is below it) cannot be checked as it is written, or None. The
    checks read the configuration as written; Hydra resolves it before it uses it, so a value
    made by an interpolation (``${oc.create:{_target_: ...}}``, ``${hydra.callbacks.other}``)
    must resolve here to a plain value, and ``_target_`` / ``class`` / ``()`` are written out."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    # OmegaConf's own parse: is the interpolation the whole value (it may make a node), or in a
    # string (it makes a string)?
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser
    from omegaconf.grammar_parser import parse

    if OmegaConf.is_interpolation(node, key):
        text = node._get_node(key)._value()
        if key in ("_target_", "class", "()"):
            return f"{where}={text}: code named through an interpolation is refused; write it out"
        parts = list(parse(text).text().getChildren())
        if len(parts) != 1 or not isinstance(parts[0], OmegaConfGrammarParser.InterpolationContext):
            return None                                   # a string with ${...} inside it
        try:
            value = node[key]
        except Exception:  # noqa: BLE001 - what cannot be resolved now cannot be checked
            return f"{where}={text} cannot be resolved before Hydra uses it, so it is refused"
        if isinstance(value, (DictConfig, ListConfig)):
            return f"{where}={text} makes a whole node through an interpolation; write it out"
        return None
    child = node._get_node(key)
    if isinstance(child, DictConfig):
        keys: Any = list(child.keys())
    elif isinstance(child, ListConfig):
        keys = range(len(child))
    else:
        return None
    return next((bad for k in keys if (bad := _interpolated(child, k, f"{where}.{k}"))), None)


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
        overrides = kwargs.get("overrides", args[1] if len(args) > 1 else None)
        return check(self.loader.load_configuration(*args, **kwargs), overrides)

    def load_sweep_config(self, master_config: Any, sweep_overrides: list[str]) -> Any:
        """A job's configuration: Hydra composes it with the sweep's own hydra.* overrides
        (checked with the sweep) and the job's."""
        from omegaconf import OmegaConf

        given = OmegaConf.to_container(master_config.hydra.overrides.hydra, resolve=False)
        return check(self.loader.load_sweep_config(master_config, sweep_overrides),
                     [*given, *sweep_overrides])
