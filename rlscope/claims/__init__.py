"""Reproduction verdicts: each manifest's paper claims, answered by queries over its results.

``schema`` is what a manifest's ``claims:`` holds; ``query`` computes a claim's number from
results tables; ``verdict`` judges it against the paper's value; ``render`` writes the table as
text, Markdown or HTML.
"""
