"""Inference services: specs, the model server runtime, the router and the autoscaler."""
