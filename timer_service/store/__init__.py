"""The store ports and their adapters (MongoDB, in-memory)."""
