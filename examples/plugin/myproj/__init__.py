"""An example fedmoo plugin. Importing the package registers its components with fedmoo; its
``conf/`` folder (algo/lossavg.yaml, data/blobs.yaml, experiment/myproj/compare.yaml) joins
fedmoo's configs."""

from myproj import blobs, lossavg  # noqa: F401  (register data=blobs, algo=lossavg)
