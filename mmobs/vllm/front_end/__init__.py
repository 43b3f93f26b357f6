"""The stages of vLLM's multimodal front end (download, base64, load, key, processor), timed where they run.

Carried from the release :data:`mmobs.releases.FIRST_PROVEN` names for ``front_end``; below it
the plugin declines the feature with one line naming the release.
"""
