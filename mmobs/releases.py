"""What differs between the vLLM releases mmobs supports, written once, as data.

A fleet runs more than the newest vLLM: a router keying for it must compute the key each replica
computes, and the plugin inside each replica must carry only what a test proves on that replica's
release. Both read this module, which imports nothing heavier than :mod:`mmobs.errors`.

**The supported range** is :data:`OLDEST` to :data:`NEWEST`, every release in :data:`RELEASES`.

**Key formats.** vLLM's key changed five times in that range (read from each release's
``vllm/multimodal/hasher.py`` and ``media/image.py``; ``tests/keys/test_releases.py`` holds every
release here to its own hasher and loader):

=========  ==================================================================================
format     what changed in the release that names it
=========  ==================================================================================
``0.25``   the oldest mmobs keys for: unframed (keys and values simply concatenated), the image's
           bytes alone, the algorithm read from ``VLLM_MM_HASHER_ALGORITHM``
``0.27``   the loader's conversion joins the key (``io_config``); video frames with their bytes
           are keyed by the smaller of the two; ``hash_kwargs(algorithm, /, **kwargs)``
``0.30``   frames as a torch tensor are keyed so too (before, they were pickled)
``0.31``   framed (vLLM PR #54283): every chunk preceded by its length, every value by its kind;
           the ImageID read tolerantly (vLLM PR #56576)
``0.33``   the loader composites an RGB image with a ``transparency`` (a PNG's ``tRNS``) onto the
           background too, so ``io_config`` joins its key; before, an image already in the
           target mode was kept as it was
=========  ==================================================================================

Every release from 0.31 on reads the EXIF ImageID tolerantly (vLLM PR #56576); before, a broken
EXIF block raised out of the hasher (vLLM issue #56527). mmobs always tolerates it, and reports it:
its key for such an image is the one the release's format gives without an ImageID.

**The plugin's features.** The plugin looks vLLM's attributes up before it replaces any
(:mod:`mmobs.vllm.shape`) and checks on probes that each replacement returns what vLLM's own returns.
A release can pass those checks and still differ where a probe does not look (what a processor cache
holds, how a uuid reaches the hasher), so a feature also declines, by name, on a release older than
the first one a test proves it on (:data:`FIRST_PROVEN`). :data:`VLLM_MODULES` names where in vLLM
each hooked attribute lives: the same modules throughout the range, for the features a release carries.

**A release outside the range, or not listed** (the policy, one for every caller):

* Where nothing checks the release, a key is never guessed: :func:`key_format` (the library's
  ``vllm_version=``, ``mmobs hash --vllm-version``) refuses any release :data:`RELEASES` does not list.
* Inside a running vLLM, the plugin checks what it can (:func:`keyed_as`, :func:`unproven`):

  - older than :data:`OLDEST`: the plugin declines whole, with one warning, and leaves vLLM untouched;
  - newer than :data:`NEWEST`, or unlisted between two listed releases: held to the key format of the
    newest listed release at or below it (its fingerprint is in that format; its keys are vLLM's own),
    and each feature proven on that listed release loads only where vLLM's shape checks and, for the
    features probed (keys, the loader, decode-free hits), their probes pass; else it declines alone;
  - no release number at all (a source build): as a release newer than :data:`NEWEST`.

  The plugin's start-up line says which of these the running release is (:func:`standing`).
  ``tests/test_releases.py`` holds this policy; a new release is checked the day it appears
  (``docs/vllm.md``, Versions) and added here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mmobs.errors import InvalidOptionError


@dataclass(frozen=True, slots=True)
class KeyFormat:
    """How a run of vLLM releases keys an item. ``name`` is the first release that keys so."""

    name: str
    #: Lengths before chunks and tags before values (0.31 on); else keys and values concatenated.
    framed: bool
    #: The loader's ``io_config`` joins an image's key when it converted the image (0.27 on).
    io_config: bool
    #: Media-with-bytes frame types keyed as ``video`` (the smaller of frames and file); others are pickled.
    video_frames: frozenset[str]
    #: The loader converts an RGB image with a ``transparency`` to RGB (0.33 on); before, only a new mode converted.
    composites_transparency: bool
    #: ``hash_kwargs(algorithm, /, **kwargs)`` (0.27 on); before, ``hash_kwargs(**kwargs)`` read the environment.
    algorithm_argument: bool
    #: The EXIF ImageID read tolerantly (0.31 on, vLLM PR #56576); before, a broken EXIF block raises out of the hasher.
    tolerant_image_id: bool

    def converts(self, target: str | None, mode: str, transparent: bool) -> bool:
        """Whether this format's loader makes a new image of one in ``mode`` (so ``io_config`` is set)."""
        if target is None:
            return False
        return (self.composites_transparency and target == "RGB" and transparent) or mode != target


_FRAMES = frozenset({"ndarray"})
_FORMATS = (
    KeyFormat("0.25", framed=False, io_config=False, video_frames=frozenset(), composites_transparency=False,
              algorithm_argument=False, tolerant_image_id=False),
    KeyFormat("0.27", framed=False, io_config=True, video_frames=_FRAMES, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=False),
    KeyFormat("0.30", framed=False, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=False),
    KeyFormat("0.31", framed=True, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=False,
              algorithm_argument=True, tolerant_image_id=True),
    KeyFormat("0.33", framed=True, io_config=True, video_frames=_FRAMES | {"tensor"}, composites_transparency=True,
              algorithm_argument=True, tolerant_image_id=True),
)  # fmt: skip
_BY_NAME = {fmt.name: fmt for fmt in _FORMATS}

#: Every vLLM release mmobs supports, oldest first, and its key format.
RELEASES: dict[str, KeyFormat] = {
    version: _BY_NAME[name]
    for version, name in (
        ("0.25.0", "0.25"), ("0.25.1", "0.25"), ("0.26.0", "0.25"),
        ("0.27.0", "0.27"), ("0.27.1", "0.27"), ("0.28.0", "0.27"), ("0.29.0", "0.27"),
        ("0.30.0", "0.30"),
        ("0.31.0", "0.31"), ("0.32.0", "0.31"),
        ("0.33.0", "0.33"), ("0.34.0", "0.33"),
    )
}  # fmt: skip
#: The oldest release supported: the plugin declines whole below it.
OLDEST = "0.25.0"
#: The newest release supported, and the one keyed when none is named.
NEWEST = "0.34.0"

#: Each feature of the plugin, and the first vLLM release on which it is proven (the tests are named in
#: ``docs/vllm.md``'s release table). ``keys``, the hasher's hooks with the fix of vLLM issue #56527 where
#: the release lacks it, and ``loader``, the loader's refusals and transpose failures, hold from :data:`OLDEST`.
FIRST_PROVEN: dict[str, str] = {
    "keys": OLDEST,
    "loader": OLDEST,
    "context": "0.32.0",
    "decode_free_hits": "0.32.0",
    "cache_drift": "0.32.0",
    "uuid_checks": "0.32.0",
    "front_end": "0.32.0",
    "engine_items": "0.32.0",
    "render": "0.32.0",
    "video": "0.32.0",
}


@dataclass(frozen=True, slots=True)
class VllmModules:
    """Where in vLLM every hook of the plugin finds what it replaces or reads.

    The same modules throughout the supported range, for the features each release carries.
    """

    hasher: str = "vllm.multimodal.hasher"
    image: str = "vllm.multimodal.image"
    media_image: str = "vllm.multimodal.media.image"
    media_video: str = "vllm.multimodal.media.video"
    media_audio: str = "vllm.multimodal.media.audio"
    video_opencv: str = "vllm.multimodal.video_decoders.opencv"
    connector: str = "vllm.multimodal.media.connector"
    connections: str = "vllm.connections"
    cache_lru: str = "vllm.multimodal.cache.lru"
    cache_base: str = "vllm.multimodal.cache.base"
    cache_shm: str = "vllm.multimodal.cache.shm"
    renderers: str = "vllm.renderers.base"
    processor: str = "vllm.multimodal.processing.processor"
    inputs: str = "vllm.multimodal.processing.inputs"
    # The engine's side and the OpenAI server's, for cache drift and the front end's stages.
    engine: str = "vllm.v1.engine"
    engine_core: str = "vllm.v1.engine.core"
    engine_client: str = "vllm.v1.engine.core_client"
    mm_inputs: str = "vllm.multimodal.inputs"
    input_processor: str = "vllm.v1.engine.input_processor"
    output_processor: str = "vllm.v1.engine.output_processor"
    async_llm: str = "vllm.v1.engine.async_llm"
    chat_serving: str = "vllm.entrypoints.openai.chat_completion.serving"
    api_utils: str = "vllm.entrypoints.serve.utils.api_utils"
    base_serving: str = "vllm.entrypoints.generate.base.serving"
    error_handlers: str = "vllm.entrypoints.serve.exception_handling.handlers.vllm_error"
    exceptions: str = "vllm.exceptions"
    # The render endpoints of `vllm serve --enable-scale-out`.
    render_serving: str = "vllm.entrypoints.scale_out.render.serving"
    serve_protocol: str = "vllm.entrypoints.serve.engine.protocol"
    parse: str = "vllm.multimodal.parse"


VLLM_MODULES = VllmModules()


def release_number(version: str) -> tuple[int, int, int] | None:
    """``(major, minor, micro)`` of a version string (``0.33.0+cpu``, ``0.35.0rc1``); None for a source build."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if match is None:
        return None
    major, minor, micro = match.groups()
    return int(major), int(minor), int(micro or 0)


def key_format(vllm_version: str | None = None) -> KeyFormat:
    """The format release ``vllm_version`` keys with (the newest for ``None``); a local suffix (``+cpu``) is ignored.

    Raises :class:`~mmobs.errors.InvalidOptionError` naming the known releases for any other: with no running
    vLLM to check against, a release :data:`RELEASES` does not list is never guessed.
    """
    if vllm_version is None:
        return RELEASES[NEWEST]
    fmt = RELEASES.get(str(vllm_version).partition("+")[0])
    if fmt is None:
        known = ", ".join(RELEASES)
        raise InvalidOptionError(
            "vllm_version", f"mmobs does not know how vLLM {vllm_version!r} keys images; known releases: {known}"
        )
    return fmt


def keyed_as(vllm_version: str) -> str:
    """The listed release a running vLLM ``vllm_version`` is held to: itself, else the newest listed at or below it.

    A source build (no release number) is held to :data:`NEWEST`. Raises
    :class:`~mmobs.errors.InvalidOptionError`, as :func:`key_format` does, for a release older than :data:`OLDEST`.
    """
    listed = str(vllm_version).partition("+")[0]
    if listed in RELEASES:
        return listed
    running = release_number(vllm_version)
    if running is None:
        return NEWEST
    below = [release for release in RELEASES if _number(release) <= running]
    if not below:
        key_format(vllm_version)  # raises, naming the known releases
    return below[-1]


def unproven(feature: str, vllm_version: str) -> str | None:
    """Why ``feature`` is not carried on ``vllm_version`` (older than its first proven release), else None.

    A version that does not start with a release number (a source build) is left to the shape checks.
    """
    running = release_number(vllm_version)
    if running is None or running >= _number(FIRST_PROVEN[feature]):
        return None
    return f"proven from vLLM {FIRST_PROVEN[feature]} on, and this is {vllm_version}"


def standing(vllm_version: str) -> str:
    """Where ``vllm_version`` stands against the supported range, in words for the plugin's start-up line."""
    running = release_number(vllm_version)
    checked = "each feature only where its checks pass"
    if running is None:
        return f"no release number: held to vLLM {NEWEST}'s key format, {checked}"
    if running < _number(OLDEST):
        return f"older than vLLM {OLDEST}, the oldest supported: declined"
    if running > _number(NEWEST):
        return f"newer than vLLM {NEWEST}, the newest supported: held to its key format, {checked}"
    if str(vllm_version).partition("+")[0] not in RELEASES:
        return f"not listed: held to vLLM {keyed_as(vllm_version)}'s key format, {checked}"
    return f"supported: vLLM {OLDEST} to {NEWEST}"


def _number(release: str) -> tuple[int, int, int]:
    number = release_number(release)
    assert number is not None, release  # every release written here has one
    return number
