"""The vLLM general plugin: mmobs's counters and events inside an unmodified vLLM.

vLLM swallows exactly what mmobs exists to count: ``_get_image_id_bytes``
tolerates a malformed EXIF block silently, ``normalize_image`` suppresses every
transpose failure, and its loader's refusals are only a 400 somewhere. The
plugin replaces a few of vLLM's module attributes with versions that return
exactly what vLLM's return (checked on probe images before anything is
replaced) and report to mmobs's observer on the way. This module holds the
registration; the features are records (:mod:`mmobs.vllm.features`, planned by
:mod:`mmobs.vllm.planning`, each plan in :mod:`mmobs.vllm.feature_plans`), and
the replacements live beside them:

=============================================  =====================================
module                                         wraps
=============================================  =====================================
:mod:`mmobs.vllm.keys.key_hooks`               the hasher: ImageID read,
                                               ``serialize_item``, ``hash_kwargs``
:mod:`mmobs.vllm.loader_hooks`                 ``normalize_image``, ``load_bytes``,
                                               ``_load_data_url`` (refusals, guard)
:mod:`mmobs.vllm.decode_free_hits.decode_skip` (inside ``load_bytes``) decode-free
                                               processor-cache hits, API server only
:mod:`mmobs.vllm.cache_drift.cache_hooks`      the processor cache drift, API server
                                               only
:mod:`mmobs.vllm.uuid_checks.uuid_check`       ``ProcessorInputs.get_mm_hashes``:
                                               client media uuids checked against
                                               their content, API server only
:mod:`mmobs.vllm.front_end.stages`             the downloads, the HF processor and
                                               ``InputProcessor.process_inputs``: the
                                               front end's stages timed, API server
                                               only
:mod:`mmobs.vllm.context_hooks`                ``make_async``, the media thread pool
                                               (the request's context carried into
                                               vLLM's executor threads), and
                                               ``get_dummy_mm_inputs`` (vLLM's own
                                               dummy inputs are not traffic)
:mod:`mmobs.vllm.engine_items.item_counter`    ``EngineCore.preprocess_add_request``:
                                               each request's items as the engine
                                               receives them, engine core only
=============================================  =====================================

With vLLM's Rust front end (``VLLM_USE_RUST_FRONTEND=1``) only the engine core's feature applies:
``vllm-rs`` runs the API server's path in Rust (:mod:`mmobs.vllm.front_ends`), and each process says
so (:mod:`mmobs.vllm.startup_line`). ``MMOBS_METRICS_PORT`` serves the series no vLLM ``/metrics`` reads
(:mod:`mmobs.vllm.metrics_port`).

Every feature but the hasher's hooks declines alone, with one line: on a vLLM
release older than the first one a test proves it on (:mod:`mmobs.releases`),
or on a vLLM shaped otherwise than it needs.

mmobs's log events go through stdlib logging under vLLM's logger tree
(``vllm.mmobs``), so vLLM's handler writes them in vLLM's format, or in the
one a ``VLLM_LOGGING_CONFIG_PATH`` config chooses (:mod:`mmobs.observability.stdlib_events`).

:func:`register` is idempotent, never raises into vLLM, and when vLLM's shape
is not what it expects logs one warning naming the vLLM version and changes
nothing. Every replacement is recorded, so :func:`unregister` restores vLLM.
"""

from __future__ import annotations

import logging
import os
import threading

from mmobs.errors import InvalidOptionError
from mmobs.observability.fingerprint import key_with_release
from mmobs.observability.instrument import metrics_for, set_hasher_info
from mmobs.observability.metrics import multiprocess_dir
from mmobs.observability.stdlib_events import log_events_to_stdlib
from mmobs.releases import keyed_as
from mmobs.vllm.decode_free_hits import clip_skip, decode_skip
from mmobs.vllm.engine_items.item_metrics import METRIC_NAMES as ENGINE_ITEM_SERIES
from mmobs.vllm.features import FEATURES
from mmobs.vllm.front_ends import FrontEnd, Role, process_role, running_front_end
from mmobs.vllm.metrics_port.port import serve_metrics_port
from mmobs.vllm.planning import Applied, Planning, plan_features
from mmobs.vllm.shape import ShapeMismatch, vllm_version
from mmobs.vllm.startup_line import startup_line
from mmobs.vllm.startup_log import LOGGER, say
from mmobs.vllm.switches import PLUGIN_ENV
from mmobs.vllm.uuid_checks.uuid_metrics import METRIC_NAMES as UUID_CHECK_SERIES

_lock = threading.Lock()
_applied: list[Applied] = []
_declined = False


def registered() -> bool:
    """Whether the plugin's replacements are in place in this process."""
    return bool(_applied)


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Idempotent; never raises."""
    global _declined
    if os.environ.get(PLUGIN_ENV, "1").strip() == "0":
        return
    with _lock:
        if _applied or _declined:
            return
        front_end = running_front_end()
        role = process_role(front_end)
        planning = Planning()
        try:  # every feature planned (looked up, probed) before anything is replaced
            planned = plan_features(FEATURES, planning, role=role, front_end=front_end, vllm_version=vllm_version())
        except ShapeMismatch as error:
            _declined = True
            say(
                logging.WARNING,
                "mmobs: vLLM %s is not shaped as this plugin expects (%s); its multimodal path is left "
                "untouched and no image is counted. Set %s=0 to silence this.",
                vllm_version(),
                error,
                PLUGIN_ENV,
            )
            return
        except Exception as error:  # noqa: BLE001 - never raise into vLLM
            _declined = True
            say(
                logging.WARNING,
                "mmobs: the vLLM plugin could not load (%s: %s); no image is counted",
                type(error).__name__,
                error,
            )
            return
        _applied.extend(hook.apply() for hooks in planned.values() for hook in hooks)
        decode_skip.activate(planning.skipper if planned["decode_free_hits"] else None)
        clip_skip.activate(planning.clip_skipper if planned["video"] else None)
        _fingerprint_in_the_running_release(front_end)
        if front_end == "rust" and planned["engine_items"]:
            # No hash runs in Python to set it on first use: the engine core says how this server keys.
            set_hasher_info(metrics_for())
        # One log stream: mmobs's events become records of vLLM's logger tree (while structlog is unconfigured).
        log_events_to_stdlib(LOGGER.name)
        served = serve_metrics_port(hooked=bool(_applied), families=_port_series(role, front_end))
        say(logging.INFO, "%s", startup_line(planned, role, front_end, served))


def _fingerprint_in_the_running_release(front_end: FrontEnd) -> None:
    """The process keys as the running vLLM keys: its fingerprint is in that release's key format, or the Rust
    front end's.

    A release :mod:`mmobs.releases` does not list is held to the newest one listed at or below it
    (:func:`~mmobs.releases.keyed_as`), a source build to the newest.
    """
    try:
        key_with_release(keyed_as(vllm_version()), front_end)
    except InvalidOptionError:  # older than the oldest supported: the hasher's hooks declined before this
        key_with_release(None, front_end)


def _port_series(role: Role, front_end: FrontEnd) -> frozenset[str]:
    """The series this process adds to ``MMOBS_METRICS_PORT``: what no vLLM ``/metrics`` reads, and nothing else.

    The engine core's item counts (and, under the Rust front end, whose ``/metrics`` reads no Python registry,
    its uuid checks and its fingerprint). Every other process's series stay where vLLM serves them: a Python API server's on its
    ``/metrics``; every process's when ``--api-server-count`` above 1 shares vLLM's ``PROMETHEUS_MULTIPROC_DIR``.
    The hasher's series of the engine core and the workers, which only vLLM's dummy inputs reach, stay off the
    port. So no series is scraped twice.
    """
    if role != "engine core" or (front_end == "python" and multiprocess_dir() is not None):
        return frozenset()
    if front_end == "python":
        return ENGINE_ITEM_SERIES
    # Under the Rust front end the engine core checks client uuids too, and says how the server keys.
    return ENGINE_ITEM_SERIES | UUID_CHECK_SERIES | {"mmobs_hasher_info"}


def unregister() -> None:
    """Put vLLM's own attributes back (tests; a process that wants vLLM untouched again)."""
    global _declined
    with _lock:
        while _applied:
            _applied.pop().restore()
        decode_skip.activate(None)
        clip_skip.activate(None)
        _declined = False
        log_events_to_stdlib(None)
