"""One run and a sweep: the round loop (``loop.run``), its run directory, evaluation rows,
checkpoints, client sampling, signals, loggers and the sweep machinery (callbacks, launchers,
GPU leases). Layer: below ``fedmoo.cli``, above the engine, algorithms, attacks, data, models.
"""
