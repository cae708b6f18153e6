"""Parameter counts (the papers' tables), output shapes and the hand-written LSTM cell."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedmoo import models
from fedmoo.errors import UserError
from fedmoo.models.lstm import LSTMShakespeare
from fedmoo.params import num_params


@pytest.mark.parametrize("cfg,shape,classes,count", [
    ({"name": "cnn_cifar"}, (3, 32, 32), 10, 797_962),            # FedMGDA+ Table 2
    ({"name": "cnn_fmnist"}, (1, 28, 28), 10, 21_840),            # FedMGDA+ Table 3
    ({"name": "cnn_femnist"}, (1, 28, 28), 62, 1_206_590),        # FedMGDA+ Table 4
    ({"name": "cnn_mnist"}, (1, 28, 28), 10, 832 + 51_264 + 1_606_144 + 5_130),
    ({"name": "mlp", "hidden": [200, 200]}, (3, 32, 32), 10, 614_600 + 40_200 + 2_010),
    ({"name": "logreg"}, (99,), 2, 200),
    # embedding 80x8 + 4*256*(8+256+1) + 4*256*(256+256+1) + 256*80+80
    ({"name": "lstm_shakespeare"}, (80,), 80, 640 + 271_360 + 525_312 + 20_560),
    ({"name": "resnet18_gn"}, (3, 32, 32), 10, 11_173_962),
])
def test_parameter_count_and_output_shape(cfg, shape, classes, count):
    model = models.build(cfg, shape, classes)
    assert num_params(model) == count
    x = torch.zeros(3, *shape)
    model.eval()
    assert tuple(model(x).shape) == (3, classes)


def test_models_follow_the_input_shape():
    assert tuple(models.build({"name": "cnn_cifar"}, (3, 64, 64), 2)(torch.zeros(1, 3, 64, 64)).shape) == (1, 2)
    assert tuple(models.build({"name": "resnet18_gn"}, (3, 64, 64), 200)(torch.zeros(1, 3, 64, 64)).shape) == (1, 200)


def test_unknown_model_option_is_a_user_error():
    with pytest.raises(UserError, match="model=cnn_cifar"):
        models.build({"name": "cnn_cifar", "width": 3}, (3, 32, 32), 10)


def test_logreg_softmax_output_returns_probabilities():
    m = models.build({"name": "logreg", "softmax_output": True}, (4,), 3)
    out = m(torch.randn(5, 4))
    assert torch.allclose(out.sum(1), torch.ones(5)) and (out > 0).all()
    assert torch.count_nonzero(m.linear.bias) == 0


def test_lstm_cell_matches_nn_lstm():
    torch.manual_seed(0)
    model = LSTMShakespeare((12,), 80, embed_dim=8, hidden=16, layers=2).double()
    ref = nn.LSTM(8, 16, num_layers=2, batch_first=True).double()
    with torch.no_grad():
        for layer, cell in enumerate(model.cells):
            getattr(ref, f"weight_ih_l{layer}").copy_(cell.weight_ih)
            getattr(ref, f"weight_hh_l{layer}").copy_(cell.weight_hh)
            getattr(ref, f"bias_ih_l{layer}").copy_(cell.bias * 0.25)
            getattr(ref, f"bias_hh_l{layer}").copy_(cell.bias * 0.75)
    tokens = torch.randint(0, 80, (4, 12))
    seq, _ = ref(model.embed(tokens))
    want = model.out(seq[:, -1])
    got = model(tokens.double())                         # token ids stored as floats
    assert torch.allclose(got, want, atol=1e-12)


def test_image_model_on_vector_data_is_a_user_error():
    with pytest.raises(UserError, match="model=cnn_cifar needs image inputs"):
        models.build({"name": "cnn_cifar"}, (60,), 10)
