"""The config contracts, torch-free, each built on the ones before it: ``knobs`` (a setting's
type, default, allowed values and help), ``plugins`` (the declared plugin packages),
``hparams`` (every component declared once: the registry and the Hydra options) and ``schema``
(the run knobs, and the check of a whole run's config)."""
