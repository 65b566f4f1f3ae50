"""Study specs, Ray Tune execution, Optuna search, MLflow parent/child runs and the
``hindsight`` command line (:mod:`sweeps.cli`).

``__version__`` is the installed distribution's version (``hindsight-lab``), read from the
package metadata so that pyproject.toml is its only source.
"""

from importlib import metadata

try:
    __version__ = metadata.version("hindsight-lab")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
