"""Datasets and models, one module per task, behind `tasks.base.FederatedTask`."""
