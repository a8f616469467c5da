"""testing subsystem of pytest-sskj."""
