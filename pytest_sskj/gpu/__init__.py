"""gpu subsystem of pytest-sskj."""
