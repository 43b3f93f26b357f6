"""What each request's multimodal items arrive as in vLLM's engine core, counted for either front end.

Carried from the release :data:`mmobs.releases.FIRST_PROVEN` names for ``engine_items``; below it the
plugin declines the feature with one line naming the release.
"""
