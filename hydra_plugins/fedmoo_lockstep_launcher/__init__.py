"""fedmoo's Hydra plugins: the launcher that trains a sweep's compatible jobs together
(lockstep_launcher, fedmoo.run.group) and the sweeper that composes each job once
(grid_sweeper)."""
