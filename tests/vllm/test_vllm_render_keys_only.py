"""Keys-only render for routers, against vLLM alone's render in the same run (the tiny Qwen2-VL).

A cache-aware router reads ``token_ids``, ``features.mm_hashes`` and ``features.mm_placeholders``
from ``POST /v1/chat/completions/render``. With ``MMOBS_VLLM_RENDER=keys`` the plugin answers them
from each image's bytes and size, without the HF processor or any tensor. Here every golden and
corpus image and every request shape a router forwards is rendered by that server and by vLLM alone
(``vllm_scale_out``, the same flags, ``MMOBS_VLLM_PLUGIN=0``), and the answers must be equal field
for field (vLLM alone asked for ``"mm_payload": "none"``, which leaves the tensors out too), errors
included, except where vLLM alone answers 5xx: the plugin answers those 4xx. With the switch unset,
the shared server (mmobs's plugin, ``--enable-scale-out``) must answer exactly as vLLM alone,
tensors included.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from scripts import corpus
from tests.support import data_url, golden, images
from tests.support.videos import Clip, clip_bytes, faststart, rotated, without_last_frame
from tests.support.vllm_kinds import ServerContext, vllm_server_fixture
from tests.support.vllm_requests import client_for
from tests.support.vllm_server import MMOBS_FLAGS, VllmServer, delta, series
from tests.vllm.render_requests import (
    CHAT,
    COMPLETIONS,
    assert_every_image_answered_alike,
    assert_same_answer,
    block_extra_keys,
    both,
    chat,
    image_part,
    moved,
    photos,
    post,
    reasons,
    tiny_mp4,
    user,
    with_orientation,
    without_request_ids,
)

pytestmark = pytest.mark.vllm_server

#: Qwen2-VL-7B-Instruct's released processor limits: a 1280x720 image is 1196 tokens, not the tiny config's 60.
RELEASED_LIMITS = {"min_pixels": 3136, "max_pixels": 12845056}
PROCESSOR_KWARGS = {"max_pixels": 200704}
MEDIA_IO_KWARGS = {"image": {"rgba_background_color": [0, 0, 0]}}


def golden_inputs() -> list[Path]:
    return sorted((golden.GOLDEN_DIR / "inputs").iterdir())


def corpus_image(name: str) -> bytes:
    (payload,) = [case.payload for case in corpus.build_corpus() if case.name == name]
    return payload


def _render_server(context: ServerContext, name: str, env: dict[str, str], *extra: str) -> VllmServer:
    return VllmServer(
        context.venv,
        context.model,
        context.directory(name),
        args=[*MMOBS_FLAGS, *extra, "--allowed-local-media-path", str(context.media_dir)],
        env=env,
        name=f"{name} ({' '.join(f'{k}={v}' for k, v in env.items())})",
        subcommand=("launch", "render") if name.startswith("launch-render") else ("serve",),
        witness_decodes=True,  # test_a_resent_image_costs_its_digest reads what Pillow decoded
    )


@vllm_server_fixture(scope="module")
def render_keys(context: ServerContext) -> VllmServer:
    """``vllm serve --enable-scale-out`` with mmobs and ``MMOBS_VLLM_RENDER=keys``: vllm_scale_out's flags."""
    env = {"MMOBS_VLLM_RENDER": "keys"}
    return _render_server(context, "render-keys", env, "--enable-scale-out", "--trust-request-mm-kwargs")


@vllm_server_fixture(scope="module")
def launch_render_alone(context: ServerContext) -> VllmServer:
    """``vllm launch render`` (vLLM's GPU-less render server) alone, with Qwen2-VL's released limits."""
    limits = json.dumps(RELEASED_LIMITS)
    return _render_server(context, "launch-render-alone", {"MMOBS_VLLM_PLUGIN": "0"}, "--mm-processor-kwargs", limits)


@vllm_server_fixture(scope="module")
def launch_render_keys(context: ServerContext) -> VllmServer:
    """``vllm launch render`` with mmobs and ``MMOBS_VLLM_RENDER=keys``, with Qwen2-VL's released limits."""
    limits = json.dumps(RELEASED_LIMITS)
    return _render_server(context, "launch-render-keys", {"MMOBS_VLLM_RENDER": "keys"}, "--mm-processor-kwargs", limits)


def test_the_start_up_line_says_what_answers_keys_only(render_keys: VllmServer) -> None:
    (line,) = [line for line in render_keys.log_lines() if "mmobs: keys-only render for" in line]
    assert render_keys.model in line and "the Qwen-VL resize rule, checked on probe images" in line
    assert "render keys-only" in next(line for line in render_keys.log_lines() if "mmobs (API server)" in line)


def test_every_image_is_answered_as_vllm_alone_answers_it(vllm_scale_out: VllmServer, render_keys: VllmServer) -> None:
    assert_every_image_answered_alike(vllm_scale_out, render_keys)


#: The shapes a keys-only render declines (counted by reason), answered with vLLM's full render.
DECLINED_SHAPES = frozenset({"request kwargs the resize rule does not read"})


def request_shapes(server: VllmServer) -> dict[str, dict[str, Any]]:
    """The bodies a router forwards: one image and several, histories re-sending images, uuids, kwargs, text only."""
    first, second, third, fourth = photos(4, seed=100)
    rgba = golden.input_bytes("rgba.png")
    reply = {"role": "assistant", "content": "A picture."}
    return {
        "four 720p photos": chat(server, user(*[image_part(p) for p in (first, second, third, fourth)])),
        "a history re-sending its images": chat(
            server, user(image_part(first)), reply, user(image_part(second), image_part(first)), reply,
            user(image_part(third), text="And this one?"),
        ),
        "a PNG with transparency": chat(server, user(image_part(rgba, media_type="image/png"))),
        "a client uuid with its data": chat(server, user(image_part(second, uuid="router-uuid-1"))),
        "the same uuid and data again": chat(server, user(image_part(second, uuid="router-uuid-1"))),
        "a uuid alone": chat(server, user(image_part(None, uuid="router-uuid-1"))),
        "a uuid alone, never sent with data": chat(server, user(image_part(None, uuid="router-uuid-unknown"))),
        "request processor kwargs": chat(server, user(image_part(first)), mm_processor_kwargs=PROCESSOR_KWARGS),
        "request kwargs the resize rule does not read": chat(
            server, user(image_part(images.jpeg_bytes((448, 224), seed=102))), mm_processor_kwargs={"do_resize": False}
        ),
        "request media io kwargs": chat(
            server, user(image_part(rgba, media_type="image/png")), media_io_kwargs=MEDIA_IO_KWARGS
        ),
        "a size the resize rule refuses": chat(server, user(image_part(images.jpeg_bytes((1, 300))))),
        "text only": chat(server, {"role": "user", "content": "Hello, render."}),
    }  # fmt: skip


def test_every_request_shape_is_answered_as_vllm_alone_answers_it(
    vllm_scale_out: VllmServer, render_keys: VllmServer
) -> None:
    before = reasons(render_keys)
    for what, body in request_shapes(vllm_scale_out).items():
        if what in DECLINED_SHAPES:  # vLLM's full render: its tensors too
            expected, found = post(vllm_scale_out, CHAT, body), post(render_keys, CHAT, body)
            assert found.status_code == expected.status_code, (what, expected.text[:300], found.text[:300])
            assert without_request_ids(found.json()) == without_request_ids(expected.json()), what
            continue
        assert_same_answer(*both(vllm_scale_out, render_keys, body), what)
    for prompt in ("A completion's prompt.", ["Two", "prompts"], [[1, 2, 3, 4]]):
        body = {"model": vllm_scale_out.model, "prompt": prompt, "max_tokens": 8}
        assert_same_answer(*both(vllm_scale_out, render_keys, body, COMPLETIONS), str(prompt))
    assert moved(before, reasons(render_keys)) == {
        ("chat", "keys", "keys_only"): 8,  # the uuid alone too: sized when it came with its data
        ("chat", "keys", "text_only"): 1,
        ("chat", "keys", "refused"): 2,  # the unknown uuid and the aspect ratio: vLLM's errors, in its words
        ("chat", "full", "processor_kwargs"): 1,  # do_resize: vLLM's processor decides
        ("completions", "keys", "text_only"): 3,
    }


def test_the_other_endpoints_and_a_clip_beside_an_image(vllm_scale_out: VllmServer, render_keys: VllmServer) -> None:
    """``/v1/responses/render`` and ``/v1/messages/render`` (through the chat one) keys-only too; a clip and an
    image in one chat keys-only; the same under processor kwargs no rule holds for gets vLLM's full render,
    tensors included: the clip answered from its header at load is decoded for it."""
    photo = photos(1, seed=400)[0]
    responses = {
        "model": vllm_scale_out.model,
        "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": data_url(photo)}, {"type": "input_text", "text": "Describe."},
        ]}],
    }  # fmt: skip
    messages = {
        "model": vllm_scale_out.model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                         "data": base64.b64encode(photo).decode()}},
            {"type": "text", "text": "Describe."},
        ]}],
    }  # fmt: skip
    video = {"type": "video_url", "video_url": {"url": data_url(tiny_mp4(render_keys.venv), "video/mp4")}}
    before = reasons(render_keys)
    assert_same_answer(*both(vllm_scale_out, render_keys, responses, "/v1/responses/render"), "responses")
    assert_same_answer(*both(vllm_scale_out, render_keys, messages, "/v1/messages/render"), "messages")
    assert_same_answer(*both(vllm_scale_out, render_keys, chat(vllm_scale_out, user(video, image_part(photo)))))
    square = clip_bytes(Clip(width=56, height=56, frames=8, seed=401, scene="pan"), render_keys.venv / "bin" / "python")
    square_video = {"type": "video_url", "video_url": {"url": data_url(square, "video/mp4")}}
    unresized = chat(
        vllm_scale_out, user(square_video, image_part(images.jpeg_bytes((448, 224), seed=402))),
        mm_processor_kwargs={"do_resize": False},
    )  # fmt: skip
    expected, found = post(vllm_scale_out, CHAT, unresized), post(render_keys, CHAT, unresized)
    assert found.status_code == expected.status_code == 200, found.text[:300]
    assert without_request_ids(found.json()) == without_request_ids(expected.json())
    assert found.json()["features"]["kwargs_data"]["video"], "vLLM's full render: its tensors"
    assert moved(before, reasons(render_keys)) == {
        ("responses", "keys", "keys_only"): 1,
        ("chat", "keys", "keys_only"): 2,
        ("chat", "full", "processor_kwargs"): 1,
    }


def test_the_routers_block_extra_keys_are_equal(vllm_scale_out: VllmServer, render_keys: VllmServer) -> None:
    """llm-d's precise scorer: each block of 16 tokens is keyed with the hashes of the items overlapping it."""
    body = request_shapes(vllm_scale_out)["a history re-sending its images"]
    expected, found = both(vllm_scale_out, render_keys, body)
    keys = block_extra_keys(found.json())
    assert keys == block_extra_keys(expected.json())
    assert len({key for key in keys if key}) >= 3 and any(len(key) == 2 for key in keys), keys  # blocks span items


def test_a_resent_image_costs_its_digest(render_keys: VllmServer) -> None:
    photo_jpegs = photos(2, seed=300)
    png = images.png_bytes(size=(320, 200), seed=301)
    body = chat(render_keys, user(*[image_part(p) for p in photo_jpegs], image_part(png, media_type="image/png")))
    first = render_keys.samples()
    decodes = [len(render_keys.decodes())]
    assert post(render_keys, CHAT, body).status_code == 200
    second = render_keys.samples()
    decodes.append(len(render_keys.decodes()))
    assert post(render_keys, CHAT, body).status_code == 200
    third = render_keys.samples()
    decodes.append(len(render_keys.decodes()))
    # What Pillow decoded in the server (the tests' witness, not mmobs's counters): the PNG once, nothing else.
    (png_decode,) = render_keys.decodes()[decodes[0] : decodes[1]]
    assert (png_decode["format"], png_decode["size"]) == ("PNG", [320, 200])
    assert decodes[2] == decodes[1]
    sources = "mmobs_vllm_render_images_total"
    assert {key: value for key, value in delta(first, second).items() if key[0] == sources} == {
        series(sources, source="header"): 2,  # the JPEGs, from their header
        series(sources, source="decode"): 1,  # the PNG, decoded by vLLM's loader
    }
    assert {key: value for key, value in delta(second, third).items() if key[0] == sources} == {
        series(sources, source="index"): 3
    }
    skipped = "mmobs_vllm_skipped_decodes_total"
    image = {"modality": "image"}
    assert (
        delta(first, second).get(series(skipped, **image)) == 2
        and delta(second, third).get(series(skipped, **image)) == 3
    )
    assert series("mmobs_vllm_late_decodes_total", modality="image") not in delta(
        first, third
    )  # nothing read the pixels
    assert (
        third[series("mmobs_vllm_decoded_index_entries", modality="image")] >= 3
        and third[series("mmobs_vllm_decoded_index_bytes", modality="image")] > 0
    )


def video_part(data: bytes, media_type: str = "video/mp4") -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": data_url(data, media_type)}}


def test_clips_are_answered_from_their_header_then_the_index_as_vllm_alone_answers_them(
    vllm_scale_out: VllmServer, render_keys: VllmServer
) -> None:
    """First-seen MP4s from their header (a frame or two read, where vLLM reads every frame to the last kept), a
    WebM decoded, and a history re-sending them from the index (nothing opened): every answer vLLM alone's."""
    python = render_keys.venv / "bin" / "python"
    pan = clip_bytes(Clip(width=320, height=240, frames=90, fps=30.0, seed=500, scene="pan"), python)
    every_frame = clip_bytes(Clip(width=160, height=120, frames=8, fps=1.0, seed=501, scene="pan"), python)
    webm = clip_bytes(Clip(width=160, height=120, frames=20, fps=10.0, container="webm", seed=502), python)
    cut = without_last_frame(faststart(clip_bytes(Clip(160, 120, frames=40, seed=504, scene="pan"), python)))
    reply = {"role": "assistant", "content": "A clip."}
    first_seen = {
        "a 3 s 30 fps MP4": chat(vllm_scale_out, user(video_part(pan))),
        "the same turned a quarter by its header": chat(vllm_scale_out, user(video_part(rotated(pan)))),
        "a 1 fps MP4, every frame kept": chat(vllm_scale_out, user(video_part(every_frame))),
        "a WebM": chat(vllm_scale_out, user(video_part(webm, "video/webm"))),
        "a faststart MP4 cut short": chat(vllm_scale_out, user(video_part(cut))),
    }
    resent = chat(
        vllm_scale_out, user(video_part(pan)), reply, user(video_part(webm, "video/webm")), reply,
        user(image_part(photos(1, seed=503)[0]), text="And this?"),
    )  # fmt: skip
    sources = "mmobs_vllm_render_videos_total"
    first, read, source = render_keys.samples(), {}, {}
    for what, body in first_seen.items():
        before, mark = render_keys.samples(), render_keys.captures()
        assert_same_answer(*both(vllm_scale_out, render_keys, body), what)
        read[what] = sum(render_keys.frames_read_since(mark))
        moved = {key: value for key, value in delta(before, render_keys.samples()).items() if key[0] == sources}
        assert list(moved.values()) == [1], (what, moved)
        source[what] = dict(next(iter(moved))[1])["source"]
    second, mark = render_keys.samples(), render_keys.captures()
    expected, found = both(vllm_scale_out, render_keys, resent)
    assert_same_answer(expected, found, "a history re-sending them")
    assert len(found.json()["features"]["mm_hashes"]["video"]) == 2
    # What OpenCV read in the server (the tests' witness): vLLM's end-of-stream check and the last frame kept
    # for a header's answer; every frame up to the last kept for the WebM; nothing at all for the re-sent clips.
    # The cut clip is answered from its header where the frames Qwen2-VL's sampling picks survived the cut, decoded
    # where they did not (the probe of its last picked frame failed): either way as vLLM alone answers it.
    assert list(source.values()) == ["header", "header", "header", "decode", source["a faststart MP4 cut short"]]
    assert all(read[what] <= 2 for what, came in source.items() if came == "header"), read
    assert all(read[what] > 2 for what, came in source.items() if came == "decode"), read
    assert read["a WebM"] >= 16, read  # Qwen2-VL keeps 2 of its 10 a second: frames 0, 5, 10 and 15
    assert render_keys.frames_read_since(mark) == []
    third = render_keys.samples()
    assert {key: value for key, value in delta(second, third).items() if key[0] == sources} == {
        series(sources, source="index"): 2,
    }
    assert series("mmobs_vllm_late_decodes_total", modality="video") not in delta(first, third)


def test_a_chats_clip_deferred_for_its_length_is_decoded_when_request_kwargs_make_it_fit(
    vllm_scale_out: VllmServer, render_keys: VllmServer
) -> None:
    """A chat completion (not a render) with a clip too long for the context at the server's processor kwargs: mmobs
    defers its decode; the request's ``max_pixels`` makes it fit, so it is decoded (late) and answered as vLLM alone
    answers it, prompt token ids and completion alike. Without the kwargs both refuse it alike."""
    python = render_keys.venv / "bin" / "python"
    clip = clip_bytes(Clip(1280, 720, frames=100, fps=4.0, seed=510, scene="still"), python)
    messages = [user(video_part(clip))]

    def ask(server: VllmServer, **extra: Any) -> tuple[int, Any]:
        try:
            completion = client_for(server).chat.completions.create(
                model=server.model, max_tokens=4, temperature=0, messages=messages,  # type: ignore[arg-type]
                extra_body={"return_token_ids": True, **extra},
            )  # fmt: skip
        except openai.APIStatusError as error:
            return error.status_code, error.response.json()["error"]["message"]
        return 200, ((completion.model_extra or {}).get("prompt_token_ids"), completion.choices[0].message.content)

    late = series("mmobs_vllm_late_decodes_total", modality="video")
    refusals = series("mmobs_vllm_video_refusals_total", budget="vllm_length")
    before = render_keys.samples()
    refused = ask(render_keys)
    assert refused == ask(vllm_scale_out) and refused[0] == 400, refused
    smaller = {"mm_processor_kwargs": {"max_pixels": 28 * 28 * 4}}
    middle = render_keys.samples()
    fits = ask(render_keys, **smaller)
    assert fits == ask(vllm_scale_out, **smaller) and fits[0] == 200, fits
    after = render_keys.samples()
    assert delta(before, middle).get(refusals) == 1 and late not in delta(before, middle)
    assert delta(middle, after).get(late) == 1 and refusals not in delta(middle, after)


def test_with_the_switch_unset_every_field_is_vllm_alones(vllm_scale_out: VllmServer, vllm_server: VllmServer) -> None:
    """The shared server (mmobs's plugin, ``--enable-scale-out``, no switch): vLLM's full render, tensors included."""
    before = vllm_server.samples()
    bodies = [
        chat(vllm_scale_out, user(image_part(path.read_bytes(), media_type="image/png"))) for path in golden_inputs()
    ]
    bodies += [request_shapes(vllm_scale_out)[what] for what in ("four 720p photos", "a history re-sending its images")]
    for body in bodies:
        expected, found = post(vllm_scale_out, CHAT, body), post(vllm_server, CHAT, body)
        assert found.status_code == expected.status_code == 200, found.text[:300]
        assert without_request_ids(found.json()) == without_request_ids(expected.json())
        assert found.json()["features"]["kwargs_data"]
    bomb = chat(vllm_scale_out, user(image_part(corpus_image("bomb-100000000x1.png"), media_type="image/png")))
    expected, found = post(vllm_scale_out, CHAT, bomb), post(vllm_server, CHAT, bomb)
    assert expected.status_code == 500 and found.status_code == 400, (expected.text[:200], found.text[:200])
    assert found.json()["error"]["message"].startswith("too_many_pixels: ")
    moved_series = delta(before, vllm_server.samples())
    render_requests = series("mmobs_vllm_render_requests_total", endpoint="chat", mode="full", reason="switch_off")
    assert moved_series[render_requests] == len(bodies)
    refused = series("mmobs_vllm_render_requests_total", endpoint="chat", mode="full", reason="refused")
    assert moved_series[refused] == 1
    decodes = [k for k in moved_series if k[0] == "mmobs_vllm_mm_decode_seconds_count"]
    processed = [k for k in moved_series if k[0] == "mmobs_vllm_mm_processor_seconds_count"]
    assert decodes and processed, sorted(moved_series)  # the stage histograms move for render requests too


def test_vllm_launch_render_answers_keys_only_with_the_released_limits(
    launch_render_alone: VllmServer, launch_render_keys: VllmServer
) -> None:
    """``vllm launch render`` (no engine), the server's ``--mm-processor-kwargs`` at Qwen2-VL-7B's released limits."""
    (line,) = [line for line in launch_render_keys.log_lines() if "mmobs: keys-only render for" in line]
    assert "first-seen JPEGs from their header" in line
    bodies = [
        request_shapes(launch_render_alone)[what] for what in ("four 720p photos", "a history re-sending its images")
    ]
    for name in ("photo.jpg", "bad-exif-header.jpg", "rgba.png"):
        bodies.append(chat(launch_render_alone, user(image_part(golden.input_bytes(name)))))
    for orientation in (6, 8):
        bodies.append(chat(launch_render_alone, user(image_part(with_orientation(orientation)))))
    for body in bodies:
        expected, found = both(launch_render_alone, launch_render_keys, body)
        assert_same_answer(expected, found)
    (placeholder,) = expected.json()["features"]["mm_placeholders"]["image"]
    assert placeholder["length"] == 128  # 448x224 turned to 224x448: a 32x16 grid of 14-pixel patches, merged 2x2
