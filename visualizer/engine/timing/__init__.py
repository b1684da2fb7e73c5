"""What a capture measures beside its trace: the builds' resources, GPU timing, the driver's occupancy."""
