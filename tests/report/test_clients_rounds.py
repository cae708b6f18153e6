"""clients_rounds.csv rows (fedmoo.report.results.ClientsRoundsWriter)."""

import csv

import numpy as np

from fedmoo.report.results import ClientsRoundsWriter


def test_multi_task_clients_log_the_mean_over_their_tasks(tmp_path):
    """Per-task arrays ``[N, S]`` crashed the writer (float() of a row); each client's row is
    the mean over its tasks, as in clients.csv."""
    path = tmp_path / "clients_rounds.csv"
    writer = ClientsRoundsWriter(path, 0)
    acc = np.array([[50.0, 100.0], [0.0, 25.0]])
    loss = np.array([[1.0, 2.0], [0.5, 0.25]])
    train = np.array([[4.0, 0.0], [1.0, 1.0]])
    writer.log(3, acc, loss, train)
    writer.log(4, np.array([10.0, 20.0]), np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    rows = list(csv.DictReader(open(path)))
    assert [(r["round"], r["client"]) for r in rows] == [("3", "0"), ("3", "1"), ("4", "0"),
                                                        ("4", "1")]
    assert [float(r["test_accuracy"]) for r in rows] == [75.0, 12.5, 10.0, 20.0]
    assert [float(r["test_loss"]) for r in rows] == [1.5, 0.375, 1.0, 2.0]
    assert [float(r["train_loss"]) for r in rows] == [2.0, 1.0, 3.0, 4.0]
