"""The control loop: store -> snapshot -> scheduler core -> decisions -> executor."""
