"""Workers that evaluate candidates pulled from Redis (RQ)."""
