"""Python SDK for the bbkb-service REST API."""
