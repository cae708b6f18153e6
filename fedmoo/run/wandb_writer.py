"""``logger=wandb``'s writer: a child process that owns the W&B run
(fedmoo.run.loggers starts it, fedmoo.run.tracker_child is its message loop).

Importing ``wandb`` and starting W&B's service take about 2 s, which run beside the run's
start-up. The head message is ``{"project", "name", "group", "dir", "config"}``; W&B's own lines
stay out of fedmoo's output. A run that ends without its final message finishes with exit code 1.
"""

from __future__ import annotations

from typing import Any

NAME = "wandb"
FLUSH_S = 1.0   # rows wait at most this long (W&B sends them on in its own service anyway)
BATCH = 100     # rows' values written in one go at most (each row is its own run.log call)


def warm() -> None:
    import wandb

    wandb.setup()          # W&B's service process, started once for this process


class Writer:
    def __init__(self, head: dict[str, Any]):
        import wandb

        self.run = wandb.init(project=head["project"], name=head["name"], group=head["group"],
                              dir=head["dir"], config=head["config"], reinit="create_new",
                              settings=wandb.Settings(silent=True))
        self.run_id = self.run.id

    def metrics(self, rows: list[tuple[dict[str, float], int]]) -> None:
        for values, step in rows:
            self.run.log(values, step=step)

    def end(self, final: dict[str, float] | None, artifacts: list[str]) -> None:
        if final is None:
            self.run.finish(exit_code=1)
            return
        self.run.summary.update(final)
        self.run.finish()


def refusal(head: dict[str, Any], e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__   # W&B's settings errors span lines
    return f"logger=wandb: W&B refused the run: {text[:300]}"
