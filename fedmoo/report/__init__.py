"""Results on disk: metrics (pure functions; their names are CSV columns), the result files'
writers and readers, finding jobs, ``fedmoo table`` and ``fedmoo plot``. Uses only the contracts."""
