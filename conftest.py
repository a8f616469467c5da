"""Repository glue: pytester for the plugin's self-tests (must be a top-level conftest)."""

pytest_plugins = ["pytester"]
