"""numerics subsystem of pytest-sskj."""
