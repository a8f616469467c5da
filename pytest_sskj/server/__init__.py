"""Server lifecycle: specs, per-node commands, launchers, health, log oracle, server pool."""
