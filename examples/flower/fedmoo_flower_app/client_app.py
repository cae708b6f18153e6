"""ClientApp: one SuperNode = one fedmoo client (``--node-config "partition-id=K"``)."""

from __future__ import annotations

from flwr.app import Context

from fedmoo.flower import LocalSGD, LocalTrainer, client_app
from fedmoo_flower_app.task import client_data, make_model


def make_trainer(context: Context) -> LocalTrainer:
    cfg, k = context.run_config, int(context.node_config["partition-id"])
    x, y, xt, yt = client_data(k, int(cfg["num-clients"]), int(cfg["data-seed"]),
                               int(cfg["max-samples"]))
    sgd = LocalSGD(lr=float(cfg["lr"]), batch_size=int(cfg["batch-size"]),
                   epochs=int(cfg["epochs"]))
    return LocalTrainer(make_model(), k, x, y, xt, yt, sgd=sgd)


app = client_app(make_trainer)
