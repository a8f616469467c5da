"""bench subsystem of pytest-sskj."""
