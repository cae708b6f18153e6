"""Multi-task data: the MultiMNIST canvas pixel by pixel, the loaders on real-format fixtures,
the objective indicator, River Flow's ARFF."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedmoo.data import federate
from fedmoo.data import multimnist
from fedmoo.data.partition import objective_indicator
from fedmoo.errors import UserError
from tests.data.conftest import write_mnist_family
from tests.data.sources import source

# floor((i + 0.5) * 36 / 28), i = 0..27, worked out by hand
NEAREST_36_TO_28 = [0, 1, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14, 16, 17, 18, 19, 21, 22, 23, 25, 26,
                    27, 28, 30, 31, 32, 34, 35]


def test_nearest_index_is_pil_nearest():
    assert multimnist.nearest_index(36, 28).tolist() == NEAREST_36_TO_28


def test_canvas_pixel_exact():
    # Prepare: images whose pixels are all distinct within each image
    rng = np.random.default_rng(0)
    left = rng.integers(0, 256, (2, 28, 28), dtype=np.uint8)
    right = rng.integers(0, 256, (2, 28, 28), dtype=np.uint8)
    # Execute
    out = multimnist.compose(left, right)
    # Assert: every output pixel (i, j) reads canvas pixel (r, c) = (N[i], N[j]) where the canvas
    # is left on 0:28, right on 6:34, max on the overlap, 0 elsewhere
    assert out.shape == (2, 28, 28) and out.dtype == np.uint8
    for n in range(2):
        for i, r in enumerate(NEAREST_36_TO_28):
            for j, c in enumerate(NEAREST_36_TO_28):
                in_l = r < 28 and c < 28
                in_r = 6 <= r < 34 and 6 <= c < 34
                vals = ([int(left[n, r, c])] if in_l else []) + \
                       ([int(right[n, r - 6, c - 6])] if in_r else [])
                assert out[n, i, j] == (max(vals) if vals else 0), (n, i, j)
    # spot checks: corners and one overlap pixel, by hand
    assert out[0, 0, 0] == left[0, 0, 0]
    assert out[0, 25, 25] == right[0, 26, 26]               # canvas (32, 32)
    assert out[0, 27, 27] == 0 and out[0, 0, 27] == 0       # canvas rows/cols 34-35: empty
    assert out[0, 10, 10] == max(left[0, 13, 13], right[0, 7, 7])


def test_canvas_matches_pil_and_torch_nearest_exact():
    from PIL import Image

    rng = np.random.default_rng(1)
    left = rng.integers(0, 256, (1, 28, 28), dtype=np.uint8)
    right = rng.integers(0, 256, (1, 28, 28), dtype=np.uint8)
    canvas = np.zeros((36, 36), np.uint8)
    canvas[:28, :28] = left[0]
    canvas[6:34, 6:34] = np.maximum(canvas[6:34, 6:34], right[0])
    pil = np.asarray(Image.fromarray(canvas).resize((28, 28), Image.NEAREST))
    torch_ne = F.interpolate(torch.from_numpy(canvas)[None, None].float(), size=(28, 28),
                             mode="nearest-exact")[0, 0].to(torch.uint8).numpy()
    out = multimnist.compose(left, right)[0]
    assert np.array_equal(out, pil) and np.array_equal(out, torch_ne)


def _fixture(tmp_path):
    mn = write_mnist_family(tmp_path / "MNIST" / "raw", n_train=(3, 3, 2), n_test=(1, 2, 1), seed=1)
    fm = write_mnist_family(tmp_path / "FashionMNIST" / "raw", n_train=(2, 2, 2), n_test=(1, 1, 1),
                            gz=True, seed=2)
    return mn, fm


@pytest.mark.parametrize("loader,left,right", [
    ("multimnist", "mn", "mn"),
    ("multifashion", "fm", "fm"),
    ("multifashion_mnist", "mn", "fm"),
])
def test_loaders_pair_every_left_image_with_a_partner_of_the_same_split(tmp_path, loader, left, right):
    arrays = dict(zip(("mn", "fm"), _fixture(tmp_path)))
    kw = {} if loader == "multimnist" else {"system_dir": None}
    src = source(loader, tmp_path, seed=3, download=False, **kw)
    assert src.task == "multitask" and src.task_names == ["L", "R"] and src.num_classes == 10
    assert tuple(src.y.shape) == (len(src.x), 2) and src.input_shape == (1, 28, 28)
    pos = 0
    for split in ("train", "test"):
        lx, ly = arrays[left][split]
        rx, ry = arrays[right][split]
        n = len(ly)
        assert src.is_test[pos:pos + n].tolist() == [split == "test"] * n
        assert src.y[pos:pos + n, 0].tolist() == ly.tolist()     # every left image, in order
        for i in range(n):
            # exactly the canvas of left image i with some right image j of the same split
            want = ((src.x[pos + i, 0].numpy() * 0.3081) + 0.1307) * 255
            matches = [j for j in range(len(ry)) if np.allclose(
                multimnist.compose(lx[i:i + 1], rx[j:j + 1])[0], want, atol=1e-3)]
            assert matches and int(src.y[pos + i, 1]) in {int(ry[j]) for j in matches}
        pos += n
    again = source(loader, tmp_path, seed=3, download=False, **kw)
    assert torch.equal(again.x, src.x) and torch.equal(again.y, src.y)


def test_subset_and_bad_counts(tmp_path):
    _fixture(tmp_path)
    src = source("multimnist", tmp_path, train_samples=5, test_samples=2, download=False)
    assert int((~src.is_test).sum()) == 5 and int(src.is_test.sum()) == 2
    with pytest.raises(UserError, match="data.train_samples=0"):
        source("multimnist", tmp_path, train_samples=0, download=False)


def test_objective_indicator_modes():
    rng = np.random.default_rng(0)
    names = ["L", "R", "C"]
    assert objective_indicator("all", None, 2, names, rng).all()
    a = objective_indicator([[0], ["R", "C"], 2], None, 3, names, rng)
    assert a.astype(int).tolist() == [[1, 0, 0], [0, 1, 1], [0, 0, 1]]
    b = objective_indicator("all", 2, 50, names, np.random.default_rng(7))
    assert (b.sum(1) == 2).all() and b.any(0).all()
    assert np.array_equal(b, objective_indicator("all", 2, 50, names, np.random.default_rng(7)))
    for tasks, per, needle in [([[0]], None, "one list of tasks per client"),
                               ([[0], []], None, r"partition.tasks\[1\] is empty"),
                               ([[0], ["X"]], None, "names task 'X'"),
                               ("all", 4, "tasks_per_client=4")]:
        with pytest.raises(UserError, match=needle):
            objective_indicator(tasks, per, 2, names, rng)


def test_federation_of_multitask_data_partitions_on_the_left_label(tmp_path):
    _fixture(tmp_path)
    src = source("multimnist", tmp_path, download=False)
    fed = federate(src, {"name": "shards", "seed": 0, "shards_per_client": 1, "tasks_per_client": 1},
                   num_clients=2)
    assert fed.num_tasks == 2 and fed.task_names == ["L", "R"]
    assert fed.task_mask.shape == (2, 2) and fed.task_mask.sum(1).tolist() == [1, 1]
    for k in range(2):   # one shard of the L-sorted samples: contiguous L labels
        labels = src.y[fed.train.of(k), 0]
        assert labels.max() - labels.min() <= 1
    fed.save_partition(tmp_path / "p.npz")
    assert np.array_equal(np.load(tmp_path / "p.npz")["task_mask"], fed.task_mask.numpy())
    with pytest.raises(UserError, match="need multi-task data"):
        federate(dataclasses.replace(src, y=src.y[:, 0], task="classification"),
                 {"name": "iid", "tasks": [[0], [1]]}, num_clients=2)


def write_rf1(path, rows):
    names = [f"F{i}" for i in range(64)] + [f"T{i}_48H__0" for i in range(8)]
    lines = ["@relation rf1", ""] + [f"@attribute {n} numeric" for n in names] + ["", "@data"]
    lines += [",".join(r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_riverflow_nominal_attribute_is_one_line(tmp_path):
    path = tmp_path / "riverflow" / "rf1.arff"
    write_rf1(path, [["1.0"] * 71 + ["x"]])
    path.write_text(path.read_text().replace("T7_48H__0 numeric", "T7_48H__0 {x,y}"))
    with pytest.raises(UserError) as e:                  # was a traceback
        source("riverflow", tmp_path)
    msg = str(e.value)              # (numpy 1 and 2 write the bytes differently)
    assert msg.startswith(f"{path} is not a readable ARFF file of numbers (ValueError: could "
                          "not convert string to float: ") and "\n" not in msg
    assert msg.endswith("); re-download rf1.arff")


def test_riverflow_arff(tmp_path):
    rows = [[str(float(i * 72 + j)) for j in range(72)] for i in range(10)]
    rows[0][3] = "?"                                   # one missing input
    write_rf1(tmp_path / "riverflow" / "rf1.arff", rows)
    src = source("riverflow", tmp_path, test_fraction=0.3, standardize=False)
    assert src.task == "multitask_regression" and tuple(src.x.shape) == (9, 64)
    assert tuple(src.y.shape) == (9, 8) and src.task_names[0] == "T0_48H__0"
    assert src.x[0, 0].item() == 72.0 and src.y[0, 0].item() == 72.0 + 64   # row 0 dropped
    assert int(src.is_test.sum()) == 3
    zero = source("riverflow", tmp_path, missing="zero", standardize=False)
    assert tuple(zero.x.shape) == (10, 64) and zero.x[0, 3].item() == 0.0
    std = source("riverflow", tmp_path)
    train = ~std.is_test
    torch.testing.assert_close(std.y[train].mean(0), torch.zeros(8), atol=1e-5, rtol=0)
    with pytest.raises(UserError, match="rf1.arff not found"):
        source("riverflow", tmp_path / "nowhere")
