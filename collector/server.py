"""The write side of a running server: store, spool, extractor, replayer, pruner, receivers.

`running(config, ...)` is one context manager the studio's lifespan enters. Start-up
order is durability: the store opens (and migrates), then the ingestor (which stores
whatever an earlier run left in the spool), and only then do receivers accept exports;
shutdown runs backwards. `WriteSide` is all the studio may use of it, so the reading
side never imports receivers, intake or jobs.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from collector.cli.admin_client import ADMIN_TOKEN_HEADER as ADMIN_TOKEN_HEADER
from collector.cli.sidecar import Sidecar, published
from collector.config import Config
from collector.foreground import Foreground
from collector.intake.ingest import Ingestor
from collector.jobs.burst_memory import BurstMemory
from collector.jobs.pruner import Pruner, prune_older_than
from collector.jobs.replayer import HistorySink, Replayer
from collector.process.allocators import release_free_memory
from collector.receive.admission import Admission
from collector.receive.auth import KeyChecker
from collector.receive.keyring import KeyRequestInvalid as KeyRequestInvalid
from collector.receive.keyring import ManagedKeys as ManagedKeys
from collector.receive.otlp_grpc import GrpcReceiver, TraceExportHandler
from collector.receive.otlp_http import TRACES_PATH as TRACES_PATH
from collector.receive.otlp_http import HttpTraceReceiver, UploadPace
from collector.store import Store
from collector.store.retention import PruneCounts

logger = logging.getLogger(__name__)

# How long a stopping server lets calls in progress finish: the gRPC receiver's
# here, uvicorn's HTTP requests (collector/cli/main.py hands it the same bound).
SHUTDOWN_GRACE_SECONDS: Final = 30

SinkT = TypeVar("SinkT", bound=HistorySink)


@dataclass(frozen=True, slots=True)
class WriteSide:
    """What the studio uses of the running write side."""

    store: Store
    managed_keys: ManagedKeys
    # Proves a caller of the admin routes can read the sidecar file (mode 0600).
    admin_token: str
    # The in-flight budget both transports share (what exports in progress hold).
    admission: Admission
    _ingestor: Ingestor
    _replayer: Replayer
    _keys: KeyChecker
    _otlp_http: HttpTraceReceiver

    @property
    def keys_required(self) -> bool:
        """Whether exports must carry an ingestion key."""
        return self._keys.required

    def backlog_bytes(self) -> int:
        """Acknowledged but not stored yet: the spool's compressed bytes."""
        return self._ingestor.backlog_bytes()

    def replaying(self) -> bool:
        """Whether stored rows or verdicts may still change."""
        # Backlog first: the extractor tells the replayer before it reports progress.
        return bool(self.backlog_bytes()) or not self._replayer.wait_idle(0)

    async def export_http(self, request: Request) -> Response:
        """Answer an OTLP/HTTP export (`POST /v1/traces`)."""
        return await self._otlp_http.export(request)

    def prune(self, older_than_nanos: int) -> PruneCounts:
        """Delete what is older than the window now, as `statetrail prune` asks."""
        return prune_older_than(self.store, older_than_nanos)


@contextlib.contextmanager
def running(
    config: Config,
    foreground: Foreground,
    *,
    history_sink: Callable[[Store], SinkT],
    grpc: bool = True,
) -> Iterator[tuple[WriteSide, SinkT]]:
    """Open the store and start the threads and receivers, in order; stop them backwards.
    `history_sink(store)` is where the replayer offers long histories (the studio's
    inspector), yielded beside the write side."""
    with contextlib.ExitStack() as stack:
        store = Store(
            config.db_path,
            checkpoint_threshold=config.checkpoint_threshold,
            memory_limit=config.memory_limit,
            threads=config.duckdb_threads,
        )
        stack.callback(store.close)
        # Runs just before it, once everything else has stopped: the closing
        # checkpoint fills DuckDB's buffer pool, and would otherwise come on
        # top of what the stopped threads freed but the allocators still hold.
        stack.callback(release_free_memory)
        sink = history_sink(store)
        replayer = Replayer(
            store,
            foreground,
            sink=sink,
            burst=BurstMemory(store, config.burst_memory_limit),
            limits=config.document_limits,
        )
        stack.callback(replayer.close)
        ingestor = Ingestor(
            store,
            config.spool_path,
            on_commit=replayer.notify,
            foreground=foreground,
            max_backlog_bytes=config.max_backlog_bytes,
            extraction_worker=config.extraction_worker,
        )
        stack.callback(ingestor.close)
        if config.retain_nanos is not None:
            # Registered after the writer, so it stops before the store closes.
            pruner = Pruner(
                store,
                config.retain_nanos,
                interval_seconds=config.prune_interval_seconds,
                first_delay_seconds=config.prune_first_delay_seconds,
            )
            stack.callback(pruner.close)
        managed_keys = ManagedKeys(store)
        keys = KeyChecker(
            config.api_keys,
            managed_keys.accepts,
            extra_required=managed_keys.any_exist,
        )
        # One budget for both transports: --max-inflight bounds the memory that
        # exports in progress hold, whichever way they arrive.
        admission = Admission(
            config.max_inflight_requests, config.max_inflight_bytes, config.client_share
        )
        if grpc:
            receiver = _start_grpc(config, ingestor, keys, admission)
            stack.callback(receiver.stop, SHUTDOWN_GRACE_SECONDS)
        otlp_http = HttpTraceReceiver(
            ingestor,
            keys,
            admission,
            max_receive_bytes=config.max_receive_bytes,
            retry_after_seconds=config.retry_after_seconds,
            pace=UploadPace(
                grace_seconds=config.upload_grace_seconds,
                min_bytes_per_second=config.min_upload_bytes_per_second,
                max_seconds=config.max_upload_seconds,
            ),
        )
        admin_token = secrets.token_urlsafe(32)
        stack.enter_context(
            published(
                config.db_path,
                Sidecar.for_listener(config.host, config.http_port, admin_token),
            )
        )
        logger.info("statetrail ready: db=%s", config.db_path)
        yield WriteSide(
            store, managed_keys, admin_token, admission, ingestor, replayer, keys, otlp_http
        ), sink


def _start_grpc(
    config: Config, ingestor: Ingestor, keys: KeyChecker, admission: Admission
) -> GrpcReceiver:
    handler = TraceExportHandler(
        ingestor,
        keys,
        admission,
        retry_after_seconds=config.retry_after_seconds,
    )
    receiver = GrpcReceiver(
        handler,
        f"{config.host}:{config.grpc_port}",
        workers=config.grpc_workers,
        max_receive_bytes=config.max_receive_bytes,
    )
    receiver.start()
    logger.info("OTLP/gRPC listening on %s:%d", config.host, receiver.port)
    return receiver
