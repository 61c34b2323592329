"""Group-median baseline advantages, published as an rllm-plugins estimator plugin."""

from .estimator import median_baseline

__all__ = ["median_baseline"]
