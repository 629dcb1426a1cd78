"""Domain types: manifests, quantities and states, free of I/O."""
