"""acceptance subsystem of pytest-sskj."""
