"""The bundle's build steps, one linear script per job (`python -m tools.<name> --help`)."""
