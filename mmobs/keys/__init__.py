"""The keys core: what vLLM's cache key for an image is, and how bytes become one.

The bottom layer. It frames and hashes (:mod:`~mmobs.keys.framing`,
:mod:`~mmobs.keys.hashing`, :mod:`~mmobs.keys.pixels`), loads images as vLLM
loads them (:mod:`~mmobs.keys.loader`, with :mod:`~mmobs.keys.formats` and
:mod:`~mmobs.keys.pixel_limit`), bounds what a file may cost before Pillow
decodes it (:mod:`~mmobs.keys.guard`), and keys bytes from their header
(:mod:`~mmobs.keys.from_bytes`). It imports nothing of the layers above: what
it has to say (a fallback, a refusal, a key source) goes through the one seam,
:mod:`mmobs.events`. Nothing here loads prometheus_client, structlog or
Starlette, so the vLLM plugin can load it in every vLLM process.
"""
