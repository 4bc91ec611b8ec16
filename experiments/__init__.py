"""Workloads run by the artifact harness (manifests in configs/ name them as module:function)."""
