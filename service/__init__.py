"""bbkb-service: BBKB optimisation as a distributed batch-evaluation service."""
