"""Turn taking: one engine deciding whose turn it is, driven by every agent."""
