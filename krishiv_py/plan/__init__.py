"""The logical plan: immutable nodes, window and watermark configuration."""
