"""Run configurations: each trainer binary's options as one dataclass tree (config files and flags)."""
