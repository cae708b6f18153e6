"""fedmoo's Hydra launcher configs (conf/hydra/launcher/) and the plugins they need.

``fedmoo run -m hydra/launcher=NAME`` checks here first, so a missing plugin is one readable
line with the pip command instead of Hydra's instantiation traceback.
"""

from __future__ import annotations

import importlib.util
import shutil

# launcher config -> (plugin module, pip requirement, fedmoo extra)
PLUGINS: dict[str, tuple[str, str, str]] = {
    "local_gpus": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher", "launchers"),
    "slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher", "launchers"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher", "ray"),
}
# launcher config -> the programs it submits with (off a cluster, submitit's traceback otherwise)
SUBMITS = {"slurm": ("sbatch", "srun")}


def plugin_available(module: str) -> bool:
    """Whether ``module`` is installed (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_launcher(args: list[str]) -> str | None:
    """An error message when ``hydra/launcher=X`` names a fedmoo launcher whose plugin, or the
    program it submits with, is not installed; None otherwise (others are left to Hydra)."""
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key.lstrip("+~") != "hydra/launcher" or value not in PLUGINS:
            continue
        module, requirement, extra = PLUGINS[value]
        if not plugin_available(module):
            return (f"hydra/launcher={value} needs the {requirement} plugin, which is not "
                    f"installed; pip install -e \".[{extra}]\" in the fedmoo checkout (or pip "
                    f"install {requirement})")
        missing = [p for p in SUBMITS.get(value, ()) if shutil.which(p) is None]
        if missing:
            return (f"hydra/launcher={value} submits with {missing[0]}, which is not "
                    "installed here (not on PATH): run the sweep on the cluster's login node, "
                    "or use hydra/launcher=local_gpus (or joblib) on this machine")
    return None
