"""The hasher's hooks: every key vLLM's hasher makes reported, with vLLM PR #56576's fix where a release lacks it.

Carried on every release the plugin knows (``keys`` in :data:`mmobs.releases.FIRST_PROVEN`):
from 0.31 vLLM reads the EXIF ImageID tolerantly and :mod:`.key_hooks` counts what that read
swallows; before, it makes the release's bare read tolerant for the length of its hashing call.
:mod:`.fast_keys` is the opt-in pixel path.
"""
