"""The DRA structured-parameters allocator: pure functions from cluster state to allocations."""
