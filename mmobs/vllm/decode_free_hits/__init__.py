"""Decode-free processor-cache hits: bytes the API server decoded before are handed on undecoded.

Carried from the release :data:`mmobs.releases.FIRST_PROVEN` names for ``decode_free_hits``;
below it the plugin declines the feature with one line naming the release.
"""
