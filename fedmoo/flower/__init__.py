"""fedmoo's server rules in Flower deployments (``pip install -e ".[flower]"``): the strategies run
any registered algorithm, ``fedmoo.flower.client`` trains on the clients with ``LocalSGD`` and
reports the scalars the rules need. See docs/scaling.md."""

from fedmoo.engine.base import LocalSGD
from fedmoo.flower.aggregation import Reply, ServerRule
from fedmoo.flower.client import FedmooClient, LocalTrainer, client_app, trainable_arrays
from fedmoo.flower.strategy import FedmooFitStrategy, FedmooStrategy

__all__ = ["FedmooClient", "FedmooFitStrategy", "FedmooStrategy", "LocalSGD", "LocalTrainer",
           "Reply", "ServerRule", "client_app", "trainable_arrays"]
