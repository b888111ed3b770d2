"""Video encoders over frame sequences."""
