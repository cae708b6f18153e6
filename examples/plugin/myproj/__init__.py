"""An example fedmoo plugin: an algorithm (lossavg.py) and a data source (blobs.py), each one
module that declares itself; its ``conf/`` folder (data/blobs.yaml, experiment/myproj/compare.yaml)
joins fedmoo's configs. fedmoo imports the modules itself; this import is for a script that uses
``fedmoo.api`` without FEDMOO_PLUGINS (``import myproj`` declares them)."""

from myproj import blobs, lossavg  # noqa: F401
