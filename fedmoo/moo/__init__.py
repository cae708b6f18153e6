"""Pure tensor math of the server rules (no algorithm state, no config): Gram matrices and
weighted sums, simplex projection, min-norm QPs, Gram-Schmidt, conflict projections, per-task
averages and the common-descent diagnostics every rule logs."""
