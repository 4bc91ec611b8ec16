"""The artifact harness: manifests in, run directories and results tables out."""

from rlscope.errors import SkipRun
from rlscope.harness.manifest import GridPoint, Manifest, load_manifest

__all__ = ["GridPoint", "Manifest", "SkipRun", "load_manifest"]
