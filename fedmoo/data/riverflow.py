"""River Flow 1 (Mulan multi-target regression): ``<data_dir>/riverflow/rf1.arff``, 9,125 rows of
64 inputs (flow at 8 sites, 8 lags) and 8 targets (each site's flow 48 h ahead), ``?`` missing
(``missing``: ``drop`` the row, as EPO's loader, or ``zero``). ``test_fraction`` of the rows,
drawn with ``seed``, form the test split; ``standardize`` z-scores with the training rows'
statistics. Mulan hosts the file (inside ``rf1.zip``): fetch it by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedmoo.data.checks import reason
from fedmoo.data.federated import Source
from fedmoo.errors import UserError

URL = "http://mulan.sourceforge.net/datasets-mtr.html"
NUM_INPUTS, NUM_TARGETS = 64, 8


def load(data_dir: Path, *, missing: str, test_fraction: float, seed: int,
         standardize: bool) -> Source:
    from scipy.io import arff

    path = data_dir / "riverflow" / "rf1.arff"
    if not path.is_file():
        raise UserError(f"data=riverflow: {path} not found; download rf1 from {URL} and put "
                        "rf1.arff there (see docs/fmol.md)")
    try:
        data, meta = arff.loadarff(str(path))
        names = list(meta.names())          # every column numeric, ``?`` read as NaN
        values = np.stack([np.asarray(data[n], dtype=np.float64) for n in names], axis=1)
    except Exception as e:  # noqa: BLE001 - scipy raises several types for malformed files
        raise UserError(f"{path} is not a readable ARFF file of numbers ({reason(e)}); "
                        "re-download rf1.arff") from None
    if values.shape[1] != NUM_INPUTS + NUM_TARGETS:
        raise UserError(f"{path} has {values.shape[1]} attributes; rf1 has "
                        f"{NUM_INPUTS + NUM_TARGETS} (64 inputs, 8 targets)")
    bad = np.isnan(values).any(axis=1)
    values = values[~bad] if missing == "drop" else np.nan_to_num(values, nan=0.0)
    x, y = values[:, :NUM_INPUTS], values[:, NUM_INPUTS:]
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(values), dtype=bool)
    is_test[rng.permutation(len(values))[: int(round(float(test_fraction) * len(values)))]] = True
    if standardize:
        for a in (x, y):
            mu, sd = a[~is_test].mean(axis=0), a[~is_test].std(axis=0)
            a -= mu
            a /= np.where(sd > 0, sd, 1.0)
    return Source(x=x.astype(np.float32), y=y.astype(np.float32), is_test=is_test,
                  num_classes=1, input_shape=(NUM_INPUTS,),
                  task="multitask_regression", task_names=names[NUM_INPUTS:])
