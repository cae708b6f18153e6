"""ServerApp: the fedmoo rule named by the run config, as a Message-API Flower strategy."""

from __future__ import annotations

import json

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedmoo.flower import FedmooStrategy, trainable_arrays
from fedmoo_flower_app.task import make_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    strategy = FedmooStrategy(str(cfg["algo"]), trainable_arrays(make_model()),
                              num_clients=int(cfg["num-clients"]),
                              clients_per_round=int(cfg["clients-per-round"]),
                              fraction_evaluate=1.0, min_evaluate_nodes=int(cfg["num-clients"]))
    result = strategy.start(grid=grid, initial_arrays=strategy.initial_record(),
                            num_rounds=int(cfg["num-server-rounds"]))
    if cfg["out"]:
        arrays = result.arrays.to_numpy_ndarrays()
        np.savez(f"{cfg['out']}.npz", *arrays)
        rounds = {int(r): dict(m) for r, m in result.train_metrics_clientapp.items()}
        evals = {int(r): dict(m) for r, m in result.evaluate_metrics_clientapp.items()}
        with open(f"{cfg['out']}.json", "w") as f:
            json.dump({"algo": cfg["algo"], "train": rounds, "evaluate": evals}, f, indent=1)
