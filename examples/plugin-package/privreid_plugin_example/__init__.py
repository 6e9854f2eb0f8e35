"""An example privreid plugin: importing it registers the method ``fedtrim`` and the dataset format ``pid-folders``.

privreid imports it through the ``privreid.plugins`` entry point of this
package's ``pyproject.toml`` (or ``privreid --plugin privreid_plugin_example``
when it is not installed).
"""

from . import pid_folders, trimmed_mean  # noqa: F401  (their imports register them)
