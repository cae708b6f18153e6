"""An example fedmoo plugin. Importing the package registers its components with fedmoo; its
``conf/`` folder (algo/lossavg.yaml, experiment/myproj/compare.yaml) joins fedmoo's configs."""

from myproj import lossavg  # noqa: F401  (registers algo=lossavg)
