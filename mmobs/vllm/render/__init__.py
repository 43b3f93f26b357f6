"""vLLM's render endpoints (``vllm serve --enable-scale-out``): counted, guarded, and keys-only on request.

A cache-aware router asks a render server for each request's ``token_ids`` and
multimodal keys and placeholders; vLLM's render decodes every image and runs
the HF processor to produce tensors the router throws away.
``MMOBS_VLLM_RENDER=keys`` answers with the same keys, token ids and
placeholders, from the bytes and the image's size (:mod:`.keys_only`).
"""
