"""fedmoo's Hydra config tree. Importing it (Hydra does, to read ``pkg://fedmoo.conf``) stores
the schema of the run knobs (``fedmoo.config.schema.Config``) that ``config.yaml`` starts from."""

from fedmoo.config.schema import register

register()
