"""An example fedmoo plugin: ``hparams.py`` declares its components (an algorithm and a data
source, each implemented in its own module); its ``conf/`` folder (data/blobs.yaml,
experiment/myproj/compare.yaml) joins fedmoo's configs. Importing the package declares them
too, for a script that uses ``fedmoo.api`` without FEDMOO_PLUGINS."""

from myproj import hparams  # noqa: F401
