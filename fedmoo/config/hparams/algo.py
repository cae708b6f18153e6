"""The server rules' hyperparameters (``algo.*``): one dataclass per rule of fedmoo.algorithms,
presets (``fedmgda_plus``, ``fsmgda``, ...) as other defaults of the same knobs. The rules'
docstrings say what each knob does to the math; the help here is what ``fedmoo list algo NAME``
and the override checks show."""

from __future__ import annotations

from typing import Optional

from fedmoo.config.hparams import NoKnobs, declare, declares
from fedmoo.config.knobs import knob, seed_knob

SOLVERS = ("daqp", "quadprog")   # the qpsolvers backends fedmoo.moo.minnorm is tested with
WEIGHTING = ("samples", "uniform")
LOSS_REPORTS = ("mean", "batch_sum")   # fedmoo.state.ClientSpec.loss_report


def _eta(default: float = 1.0, what: str = "server step (learning rate)") -> float:
    return knob(default, what, lo=0.0, lo_open=True)


def _solver() -> str:
    """The min-norm QP's backend (FedMGDA's box QP, FMGDA's task QP)."""
    return knob("daqp", "QP backend: daqp | quadprog (a bounded Frank-Wolfe solve backs both up)",
                choices=SOLVERS)


@declares("algo", "fedavg", "fedmoo.algorithms.fedavg:FedAvg",
          "FedAvg: federated averaging, the sample-weighted (or uniform) mean of client updates")
class FedAvg:
    weighting: str = knob("samples", "client weights: samples (n_k / n) | uniform (1 / K)",
                          choices=WEIGHTING)
    eta: float = _eta()


@declares("algo", "fedprox", "fedmoo.algorithms.fedprox:FedProx",
          "FedProx: FedAvg with a proximal term (mu/2)||w - w_t||^2 on the clients")
class FedProx(FedAvg):
    mu: float = knob(0.01, "client proximal term (mu/2)||w - w_t||^2; paper grid {0.001, 0.01, "
                     "0.1, 0.5, 1, 10}; 0 = FedAvg", lo=0.0)


@declares("algo", "qfedavg", "fedmoo.algorithms.qfedavg:QFedAvg",
          "q-FedAvg: q-FFL, reweights clients by loss^q for a fairer accuracy spread")
class QFedAvg:
    q: float = knob(1.0, "fairness exponent; grid {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 15}; "
                    "0 = uniform FedAvg", lo=0.0)
    L: Optional[float] = knob(None, "Lipschitz estimate; null = 1 / client.lr (authors' code)",
                              lo=0.0, lo_open=True)
    loss_at: str = knob("before", "before (loss of w_t, q-FFL) | after (of the trained local "
                        "model, easyFL v1.0)", choices=("before", "after"))
    loss_report: str = knob("mean", "the loss a client reports: mean (over its training set) | "
                            "batch_sum (sum of its per-minibatch mean losses = mean x "
                            "ceil(n_k / client.batch_size): the FedMGDA+ authors' Adult code)",
                            choices=LOSS_REPORTS)


# MGDA-Prox: the paper's mu = 0.1 is the authors' 0.1 ||w - w_t||^2 (no 1/2); fedmoo's term is
# (mu/2) ||w - w_t||^2, so the authors' strength is mu = 0.2
@declares("algo", "mgda_prox", "fedmoo.algorithms.fedmgda:FedMGDA",
          "MGDA-Prox: FedMGDA+ with a proximal term on the clients (mu = 0.2, the authors' 0.1)",
          normalize=True, eta_decay=0.1, mu=0.2)
@declares("algo", "fedavg_n", "fedmoo.algorithms.fedmgda:FedMGDA",
          "FedAvg-n: uniform mean of normalised client updates with a decaying step",
          epsilon=0.0, normalize=True, eta_decay=0.1)
@declares("algo", "fedmgda_plus", "fedmoo.algorithms.fedmgda:FedMGDA",
          "FedMGDA+: min-norm combination of normalised updates with a decaying step",
          normalize=True, eta_decay=0.1)
@declares("algo", "fedmgda", "fedmoo.algorithms.fedmgda:FedMGDA",
          "FedMGDA: min-norm (MGDA) combination of raw client updates, eps = 1, eta = 1")
class FedMGDA:
    epsilon: float = knob(1.0, "box half-width around lambda0, in [0, 1]; 0 = FedAvg, 1 = "
                          "unconstrained MGDA; grid {0.01, 0.05, 0.1, 0.5, 1}", lo=0.0, hi=1.0)
    normalize: bool = knob(False, "divide each update by its norm")
    lambda0: str = knob("uniform", "box centre: uniform (authors' code) | samples (n_k-weighted, "
                        "FLGo)", choices=("uniform", "samples"))
    eta: float = _eta(what="global step; grid {0.5, 1, 1.5, 2}")
    eta_decay: Optional[float] = knob(None, "total step decay over the run, in (0, 1]; grid "
                                      "{null, 1/40, 1/30, 1/20, 1/10, 1/3, 1/2}; null = none",
                                      lo=0.0, lo_open=True, hi=1.0)
    mu: float = knob(0.0, "client proximal term (mu/2)||w - w_t||^2; > 0 gives MGDA-Prox",
                     lo=0.0)
    solver: str = _solver()


@declares("algo", "adafed", "fedmoo.algorithms.adafed:AdaFed",
          "AdaFed: Gram-Schmidt common descent direction, descent rates proportional to "
          "loss^gamma")
class AdaFed:
    gamma: float = knob(1.0, "descent rates proportional to loss^gamma; grid {0, 0.01, 0.1, 1, "
                        "5, 10}", lo=0.0)
    eta: float = _eta()
    loss: str = knob("local_last", "local_last (mean loss of the last local epoch) | trained "
                     "(trained model, Alg. 1 l.9) | global (loss of w_t)",
                     choices=("local_last", "trained", "global"))
    normalize: bool = knob(False, "divide each update by its norm first")


@declares("algo", "afl", "fedmoo.algorithms.afl:AFL",
          "AFL: agnostic FL, minimax over client mixtures (needs clients_per_round=null)")
class AFL:
    gamma_lambda: float = knob(0.1, "ascent step on the mixture; grid {0.01, 0.1, 0.2, 0.5, 1}",
                               lo=0.0)
    eta: float = _eta()
    average_iterates: bool = knob(True, "evaluate the running average of the iterates (paper)")
    loss: str = knob("before", "the loss of the lambda step: before (of w_t, paper) | local_last "
                     "(mean loss of the last local epoch, the FedMGDA+ authors' Adult code)",
                     choices=("before", "local_last"))


@declares("algo", "ditto", "fedmoo.algorithms.ditto:Ditto",
          "Ditto: FedAvg global model plus regularised personal models (evaluated)")
class Ditto:
    lam: float = knob(1.0, "personalisation strength; grid {0.05, 0.1, 0.2, 0.5, 1, 2, 5}",
                      lo=0.0)


@declares("algo", "fedfa", "fedmoo.algorithms.fedfa:FedFA",
          "FedFA: accuracy- and frequency-based weights with server momentum (use "
          "client.momentum=0.9)")
class FedFA:
    beta: float = knob(0.5, "weight of the selection-frequency term, in [0, 1]", lo=0.0, hi=1.0)
    gamma: float = knob(0.5, "server momentum, in [0, 1)", lo=0.0, hi=1.0, hi_open=True)
    aggregate: str = knob("weighted", "weighted (FedFA's weights) | uniform (plain mean: easyFL "
                          "v1.0 ignores them)", choices=("weighted", "uniform"))
    acc_at: str = knob("before", "before (accuracy of w_t) | after (of the trained local model, "
                       "easyFL v1.0)", choices=("before", "after"))


@declares("algo", "fedfv", "fedmoo.algorithms.fedfv:FedFV",
          "FedFV: project away conflicting client updates (inside the cohort and vs history)")
class FedFV:
    alpha: float = knob(0.1, "share of largest-loss clients kept unprojected, in [0, 1]; grid "
                        "{0, 0.1, 0.2, 1/3, 0.5, 2/3}", lo=0.0, hi=1.0)
    tau: int = knob(1, "rounds of history for external conflicts; grid {0, 1, 3, 10}", lo=0)
    order: str = knob("loss", "projection order: loss | random | reverse (ablations)",
                      choices=("loss", "random", "reverse"))
    history: str = knob("paper", "paper (rounds t-tau..t-1) | flgo (t-tau+1..t)",
                        choices=("paper", "flgo"))
    eta: float = _eta()
    seed: int = seed_knob("seed of order=random")


@declares("algo", "fsmgda", "fedmoo.algorithms.fmgda:FSMGDA",
          "FSMGDA: per-task local minibatch SGD, task averages, S-task min-norm step")
@declares("algo", "fmgda", "fedmoo.algorithms.fmgda:FMGDA",
          "FMGDA: per-task local full-batch GD, task averages, S-task min-norm step")
class FMGDA:
    local_steps: int = knob(10, "K local steps per task (client.lr is the local rate eta_L)",
                            lo=1)
    eta: float = _eta(0.1, "global learning rate eta_t (paper 0.1)")
    qp_on: str = knob("trunk", "trunk (shared parameters, FedCMOO code) | all (trunk and heads)",
                      choices=("trunk", "all"))
    weighting: str = knob("uniform", "per-task average over its clients: uniform (paper "
                          "1/|R_s|) | samples", choices=("uniform", "samples"))
    solver: str = _solver()
    stationarity_every: int = knob(1, "train/lambda_grad_norm_sq on evaluated rounds that are "
                                   "multiples of this (0 = never)", lo=0)


@declares("algo", "term", "fedmoo.algorithms.term:TERM",
          "TERM: tilted averaging, client weights proportional to exp(t * loss)")
class TERM:
    t: float = knob(0.1, "tilt; grid {0.1, 0.5, 1, 2, 5}")
    normalization: str = knob("reference", "reference (authors' code, extra 1/K) | softmax",
                              choices=("reference", "softmax"))


@declares("algo", "trimmed_mean", "fedmoo.algorithms.robust:TrimmedMean",
          "TrimmedMean: coordinate-wise trimmed mean of client updates (robust aggregator)")
class TrimmedMean:
    beta: float = knob(0.1, "fraction trimmed on each side, in [0, 0.5)", lo=0.0, hi=0.5,
                       hi_open=True)


@declares("algo", "krum", "fedmoo.algorithms.robust:Krum",
          "Krum: apply the one client update closest to its neighbours (robust aggregator)")
class Krum:
    f: int = knob(1, "assumed Byzantine clients per cohort; needs clients_per_round >= 2f+3",
                  lo=0)


@declares("algo", "multikrum", "fedmoo.algorithms.robust:MultiKrum",
          "Multi-Krum: average the m client updates with the best Krum scores (robust aggregator)")
class MultiKrum(Krum):
    m: Optional[int] = knob(None, "updates averaged; null = clients_per_round - f", lo=1)


declare("algo", "median", NoKnobs, "fedmoo.algorithms.robust:Median",
        "Median: coordinate-wise median of client updates (robust aggregator)")
