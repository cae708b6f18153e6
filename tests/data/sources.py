"""Load a data source as a run does: its settings completed with the declared defaults
(fedmoo/hparams/data.py) and checked, then the loader, then the checks of the loaded samples."""

from __future__ import annotations

from fedmoo.data import load_source


def source(slug: str, data_dir, **settings):
    return load_source({"name": slug, **settings}, "." if data_dir is None else data_dir)
