"""The engines: a seeded random mutator (the CI slice) and atheris; findings and reproduction."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from .containers import materialize
from .harness import Harness, Stats
from .modules import load_modules
from .mutations import mutate
from .seeds import seed_inputs


class _Timeout(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def record_finding(stats: Stats, data: bytes, error: BaseException, findings_dir: Path | None) -> dict[str, Any]:
    kind, encoded = materialize(data)
    text = "".join(traceback.format_exception(error))
    digest = hashlib.sha1(data).hexdigest()[:16]
    finding = {
        "input_sha1": digest,
        "kind": kind,
        "exception": type(error).__qualname__,
        "message": str(error)[:500],
        "traceback": text,
        "signature": _signature(error),
    }
    stats.findings.append(finding)
    if findings_dir is not None:
        findings_dir.mkdir(parents=True, exist_ok=True)
        (findings_dir / f"finding-{digest}.input").write_bytes(data)
        (findings_dir / f"finding-{digest}.image").write_bytes(encoded)
        (findings_dir / f"finding-{digest}.txt").write_text(text)
    return finding


def _signature(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(error).__qualname__}@{where}"


def run_random(
    seed: int,
    runs: int | None = None,
    max_time: float | None = None,
    *,
    findings_dir: Path | None = None,
    report_every: float = 0.0,
    timeout: float = 10.0,
    harness: Harness | None = None,
    max_pool: int = 4000,
    stop_on_finding: bool = False,
    stats_file: Path | None = None,
) -> Stats:
    """The deterministic mutator: the same seed and runs give the same inputs."""
    harness = harness or Harness()
    stats = harness.stats
    rng = random.Random(seed)
    pool = seed_inputs()
    seeds = len(pool)
    seen_outcomes: set[str] = set()
    signatures: set[str] = set()
    deadline = time.monotonic() + max_time if max_time else None
    last_report = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _on_alarm) if timeout else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index = 0
            while (runs is None or index < runs) and (deadline is None or time.monotonic() < deadline):
                # Every seed once, as it is; then mutants of the pool.
                data = pool[index] if index < seeds else mutate(rng.choice(pool), rng, pool)
                index += 1
                try:
                    if timeout:
                        signal.setitimer(signal.ITIMER_REAL, timeout)
                    outcome = harness.run(data)
                except _Timeout as error:
                    outcome = "timeout"
                    _note(stats, data, error, findings_dir, signatures, f"timeout after {timeout} s")
                except Exception as error:  # noqa: BLE001 - every escape is a finding
                    outcome = "finding"
                    _note(stats, data, error, findings_dir, signatures, None)
                    if stop_on_finding:
                        break
                finally:
                    if timeout:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                if outcome not in seen_outcomes:
                    seen_outcomes.add(outcome)
                    if len(pool) < max_pool:
                        pool.append(data)
                elif len(pool) < max_pool and rng.random() < 0.002:
                    pool.append(data)  # keep some diversity
                if report_every and time.monotonic() - last_report >= report_every:
                    last_report = time.monotonic()
                    _report(stats, len(pool), stats_file)
    finally:
        if previous is not None:
            signal.signal(signal.SIGALRM, previous)
    return stats


def _note(
    stats: Stats, data: bytes, error: BaseException, findings_dir: Path | None, signatures: set[str], label: str | None
) -> None:
    signature = label or _signature(error)
    finding = record_finding(stats, data, error, findings_dir)
    if signature not in signatures:
        signatures.add(signature)
        print(
            f"\n*** finding {finding['input_sha1']} ({finding['kind']}): {signature}\n{finding['traceback']}",
            flush=True,
        )


def _report(stats: Stats, pool: int | None, stats_file: Path | None) -> None:
    summary = stats.as_dict()
    if pool is not None:
        summary["pool"] = pool
    print(
        f"[{summary['seconds']:>7}s] execs={summary['executions']} ({summary['exec_per_second']}/s) "
        f"loaded={summary['loaded']} fallback_items={summary['fallback_items']} "
        f"fallbacks={summary['fallback_exceptions']} findings={summary['findings']}",
        flush=True,
    )
    if stats_file is not None:
        stats_file.write_text(json.dumps(summary, indent=1) + "\n")


def run_atheris(args: argparse.Namespace) -> None:
    import atheris

    load_modules(instrument=True)
    harness = Harness(max_pixels=args.max_pixels)
    stats = harness.stats
    workdir = Path(args.workdir)
    corpus_dir = workdir / "atheris-corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    for data in seed_inputs():
        (corpus_dir / f"seed-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
    findings_dir = workdir / "findings"
    stats_file = workdir / "atheris-stats.json"
    last_report = [time.monotonic()]
    warnings.simplefilter("ignore")

    def test_one_input(data: bytes) -> None:
        try:
            harness.run(data)
        except Exception as error:
            record_finding(stats, data, error, findings_dir)
            _report(stats, None, stats_file)
            raise
        if time.monotonic() - last_report[0] >= args.report_every:
            last_report[0] = time.monotonic()
            _report(stats, None, stats_file)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return mutate(data, rng, None, max_size)
        return atheris.Mutate(data, max_size)

    libfuzzer_args = [
        sys.argv[0],
        str(corpus_dir),
        f"-max_len={args.max_len}",
        f"-timeout={int(args.timeout)}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        f"-artifact_prefix={findings_dir}/",
        f"-seed={args.seed}",
        "-print_final_stats=1",
        # libtiff writes every complaint to stderr (millions of lines); findings are saved as files.
        "-close_fd_mask=2",
    ]
    if args.runs:
        libfuzzer_args.append(f"-runs={args.runs}")
    if args.max_time:
        libfuzzer_args.append(f"-max_total_time={int(args.max_time)}")
    findings_dir.mkdir(parents=True, exist_ok=True)
    atheris.Setup(libfuzzer_args, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


def reproduce(path: Path) -> int:
    """Run one saved input (a fuzz input, or with --image, an image file) and print what happens."""
    harness = Harness()
    data = path.read_bytes()
    try:
        outcome = harness.run(data)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    print(f"{path}: {outcome}")
    return 0
