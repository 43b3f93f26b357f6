"""Drift between vLLM's two multimodal caches: hooked, counted, logged and healed in the API server.

Carried from the release :data:`mmobs.releases.FIRST_PROVEN` names for ``cache_drift``; below
it the plugin declines the feature with one line naming the release.
"""
