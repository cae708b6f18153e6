"""fedmoo's Hydra launcher that trains a sweep's compatible jobs together (fedmoo.run.group)."""
