"""The frozen configuration, built once at the edge from flags and environment.

Nothing else in statetrail reads `os.environ`: every component receives the
`Config` (or the few values it needs) from whoever built it. Each flag has a
`STATETRAIL_*` environment equivalent; a flag given on the command line wins.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collector.durations import RETENTION_UNITS, DurationError, parse_duration
from collector.replay.jsondoc import DEFAULT_LIMITS, MAX_JSON_DEPTH, DocumentLimits

DEFAULT_DB = "statetrail.duckdb"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_GRPC_PORT = 4317
DEFAULT_HTTP_PORT = 4318
MIB = 1024 * 1024


class ConfigError(ValueError):
    """A setting is invalid or unsafe; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Config:
    db_path: Path = Path(DEFAULT_DB)
    host: str = DEFAULT_HOST
    grpc_port: int = DEFAULT_GRPC_PORT
    http_port: int = DEFAULT_HTTP_PORT
    # The ingestion keys configured: the --api-key flags and the --keys-file's keys,
    # read once here (keys managed in the database are collector/receive/keyring.py's).
    api_keys: frozenset[str] = frozenset()
    insecure: bool = False
    max_receive_bytes: int = 64 * MIB
    # Overload protection: past either bound an export is refused with a retry
    # delay instead of queueing without limit (memory stays bounded).
    max_inflight_requests: int = 32
    max_inflight_bytes: int = 256 * MIB
    retry_after_seconds: int = 2
    # Exports made durable in the intake spool but not yet stored in DuckDB
    # (collector/intake/ingest.py); past this, exports are refused with a retry delay.
    max_backlog_bytes: int = 1024 * MIB
    grpc_workers: int = 16
    # The rows not yet checkpointed (mostly replay's field-index rows) stay in DuckDB's
    # pool; a low threshold keeps them from crowding a burst's lower limit
    # (docs/memory.md, "Checkpoint threshold").
    checkpoint_threshold: str = "32MB"
    # DuckDB would otherwise cache up to 80% of RAM. Two values: the first for the
    # studio's queries, the second while a burst is stored and replayed, when memory
    # peaks; None keeps one limit throughout (docs/memory.md, "Two DuckDB limits").
    memory_limit: str = "128MB"
    burst_memory_limit: str | None = "64MB"
    # On two cores DuckDB's own threads competed with the receivers, the extractor and
    # the replayer, and a checkpoint on both cores held more memory at once.
    duckdb_threads: int = 1
    # Decode and extract exports in a child process (collector/intake/worker.py):
    # on the server's interpreter lock they delayed every acknowledgement.
    extraction_worker: bool = True
    # Studio access (studio/access.py): a login is required when `auth` is set
    # or the studio listens beyond loopback. repr=False keeps the secret out of logs.
    auth: bool = False
    studio_password: str | None = field(default=None, repr=False)
    # The sign-in throttle (studio/login_throttle.py): wrong passwords allowed from
    # one address, and from all together, before refusing; both over this window.
    login_failures: int = 10
    login_failures_global: int = 100
    login_window_seconds: float = 300.0
    # Proxies whose X-Forwarded-For/-Proto uvicorn believes (addresses or networks,
    # "*" for any); empty: none, the headers are ignored.
    forwarded_allow_ips: tuple[str, ...] = ()
    # Retention (collector/jobs/pruner.py): None keeps everything forever.
    retain_nanos: int | None = None
    prune_interval_seconds: float = 600.0
    prune_first_delay_seconds: float = 30.0
    # The path prefix a reverse proxy serves the studio under and strips before
    # forwarding ("/statetrail"), so every link the studio writes carries it;
    # "" when the studio is served at the root.
    root_path: str = ""
    # Slow clients on the HTTP port (docs/limits.md): a request head
    # must arrive within `head_timeout_seconds` of the connection opening (or of
    # its previous answer); a keep-alive connection idle for `idle_timeout_seconds`
    # is closed; an OTLP/HTTP body may take `upload_grace_seconds` plus one second
    # per `min_upload_bytes_per_second` it sent, at most `max_upload_seconds`,
    # and pause no longer than the grace (collector/receive/otlp_http.py UploadPace).
    head_timeout_seconds: float = 10.0
    idle_timeout_seconds: int = 5
    upload_grace_seconds: float = 5.0
    min_upload_bytes_per_second: int = 16 * 1024
    max_upload_seconds: float = 60.0
    # The most of the in-flight byte budget one address, or one key, may hold
    # (collector/receive/admission.py), so one client cannot fill it alone.
    client_share: float = 0.5
    # The most one replayed state may hold (docs/limits.md, "Documents"): a patch
    # that would take a state past it is not applied, and the run says so.
    document_limits: DocumentLimits = DEFAULT_LIMITS

    @property
    def spool_path(self) -> Path:
        return spool_path_for(self.db_path)

    @property
    def studio_auth_required(self) -> bool:
        """Whether every studio page and API route needs a login."""
        return self._login_reason() is not None

    def _login_reason(self) -> str | None:
        """Why the studio needs a login, or None. Behind a reverse proxy (a root path,
        trusted proxies) every visitor arrives from loopback, which vouches for no one."""
        if self.auth:
            return "--auth was given"
        if not is_loopback(self.host):
            return f"it listens on {self.host}"
        if self.root_path:
            return f"--root-path {self.root_path} says a reverse proxy publishes it"
        if self.forwarded_allow_ips:
            return "--forwarded-allow-ips says a reverse proxy publishes it"
        return None

    def check_exposure(self) -> None:
        """Refuse to listen beyond loopback with no key unless told to, and say why.

        A keys file counts only if it holds a key: an empty one (a template not
        filled in yet) would otherwise expose an unauthenticated receiver.
        """
        if self.insecure or self.api_keys:
            return
        if not is_loopback(self.host):
            raise ConfigError(
                f"refusing to listen on {self.host} without API keys: anyone who can reach "
                "it could write telemetry. Give --api-key (or a --keys-file with at least "
                "one key), or --insecure if the network is trusted."
            )

    def check_studio_access(self) -> None:
        """Refuse to serve a studio that needs a login when no password was set."""
        reason = self._login_reason()
        if reason is not None and not self.studio_password:
            raise ConfigError(
                f"refusing to start: the studio needs a login because {reason}, but no "
                "password is set. Give --studio-password-file (or env "
                "STATETRAIL_STUDIO_PASSWORD, or --studio-password)."
            )


def spool_path_for(db_path: Path) -> Path:
    """The intake spool directory, beside the database file (collector/intake/spool.py)."""
    return db_path.with_name(db_path.name + ".spool")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_serve_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """Flags for `statetrail serve`; defaults come from STATETRAIL_* variables."""

    def env(name: str, default: str) -> str:
        return environ.get(f"STATETRAIL_{name}", default)

    add_db_argument(parser, environ)
    parser.add_argument(
        "--host", default=env("HOST", DEFAULT_HOST),
        help="address for both listeners (env STATETRAIL_HOST; default %(default)s)",
    )
    parser.add_argument(
        "--grpc-port", type=int, default=int(env("GRPC_PORT", str(DEFAULT_GRPC_PORT))),
        help="OTLP/gRPC port (env STATETRAIL_GRPC_PORT; default %(default)s)",
    )
    parser.add_argument(
        "--http-port", type=int, default=int(env("HTTP_PORT", str(DEFAULT_HTTP_PORT))),
        help="studio and OTLP/HTTP port (env STATETRAIL_HTTP_PORT; default %(default)s)",
    )
    parser.add_argument(
        "--api-key", action="append", dest="api_keys",
        default=[k for k in env("API_KEY", "").split(",") if k],
        help="accept exports carrying this key; repeatable (env STATETRAIL_API_KEY, "
        "comma-separated). Prefer --keys-file or the variable: every local user can "
        "read a flag's value in ps",
    )
    parser.add_argument(
        "--keys-file", type=Path, default=_optional_path(env("KEYS_FILE", "")),
        help="file of accepted keys, one per line (env STATETRAIL_KEYS_FILE); "
        "the way to give keys",
    )
    parser.add_argument(
        "--insecure", action="store_true",
        default=env("INSECURE", "") not in ("", "0", "false"),
        help="allow listening beyond loopback without keys (env STATETRAIL_INSECURE)",
    )
    parser.add_argument(
        "--max-receive-mib", type=int, default=int(env("MAX_RECEIVE_MIB", "64")),
        help="largest accepted export request (env STATETRAIL_MAX_RECEIVE_MIB; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--max-inflight", type=int, default=int(env("MAX_INFLIGHT", "32")),
        help="exports processed at once before refusing with a retry delay "
        "(env STATETRAIL_MAX_INFLIGHT; default %(default)s)",
    )
    parser.add_argument(
        "--max-backlog-mib", type=int, default=int(env("MAX_BACKLOG_MIB", "1024")),
        help="received exports not yet stored (kept compressed in DB.spool/; MiB on disk) "
        "before refusing new ones with a retry delay (env STATETRAIL_MAX_BACKLOG_MIB; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--duckdb-threads", type=_positive_int, default=env("DUCKDB_THREADS", "1"),
        help="threads DuckDB may use for one query or checkpoint; more speeds up studio "
        "queries over large stores on a many-core machine, at the cost of memory "
        "(env STATETRAIL_DUCKDB_THREADS; default %(default)s)",
    )
    parser.add_argument(
        "--no-extraction-worker", dest="extraction_worker", action="store_false",
        default=env("EXTRACTION_WORKER", "1") not in ("0", "false"),
        help="decode and extract exports in the server process instead of a child process "
        "(env STATETRAIL_EXTRACTION_WORKER=0)",
    )
    parser.add_argument(
        "--auth", action="store_true", default=env("AUTH", "") not in ("", "0", "false"),
        help="require a studio login even on loopback (always required beyond loopback; "
        "env STATETRAIL_AUTH)",
    )
    parser.add_argument(
        "--studio-password", default=env("STUDIO_PASSWORD", "") or None,
        help="the studio password, also accepted as 'Authorization: Bearer <password>' "
        "by /api (env STATETRAIL_STUDIO_PASSWORD). Prefer --studio-password-file or "
        "the variable: every local user can read a flag's value in ps",
    )
    parser.add_argument(
        "--studio-password-file", type=Path,
        default=_optional_path(env("STUDIO_PASSWORD_FILE", "")),
        help="read the studio password from this file's first line; the way to give it "
        "(env STATETRAIL_STUDIO_PASSWORD_FILE)",
    )
    parser.add_argument(
        "--login-failures", type=_positive_int, default=env("LOGIN_FAILURES", "10"),
        help="wrong studio passwords (sign-in form or Bearer) one client address may send "
        "before it is locked out for a while (env STATETRAIL_LOGIN_FAILURES; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--login-failures-global", type=_positive_int,
        default=env("LOGIN_FAILURES_GLOBAL", "100"),
        help="wrong studio passwords from all addresses together in one --login-window "
        "before only addresses that signed in before may try (env "
        "STATETRAIL_LOGIN_FAILURES_GLOBAL; default %(default)s)",
    )
    parser.add_argument(
        "--login-window", type=_duration_argument, default=env("LOGIN_WINDOW", "5m"),
        help="the period the sign-in throttle counts over, and its longest lockout, e.g. 5m "
        "(units s, m, h, d, w; env STATETRAIL_LOGIN_WINDOW; default 5m)",
    )
    parser.add_argument(
        "--forwarded-allow-ips", type=_forwarded_allow_ips,
        default=env("FORWARDED_ALLOW_IPS", ""),
        help="comma-separated addresses or networks of the reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto to believe, e.g. 127.0.0.1; the studio "
        "then needs a login (env STATETRAIL_FORWARDED_ALLOW_IPS; default: believe none)",
    )
    parser.add_argument(
        "--root-path", type=root_path_argument, default=env("ROOT_PATH", ""),
        help="path prefix a reverse proxy serves the studio under and strips before "
        "forwarding, e.g. /statetrail; links and cookies then carry it "
        "(env STATETRAIL_ROOT_PATH; default: served at /)",
    )
    _add_connection_limit_arguments(parser, env)
    parser.add_argument(
        "--max-state-mib", type=_positive_int,
        default=env("MAX_STATE_MIB", str(DEFAULT_LIMITS.max_bytes // MIB)),
        help="largest replayed state, as compact JSON; a patch that would make a state "
        "larger is not applied (env STATETRAIL_MAX_STATE_MIB; default %(default)s)",
    )
    parser.add_argument(
        "--max-state-nodes", type=_positive_int,
        default=env("MAX_STATE_NODES", str(DEFAULT_LIMITS.max_nodes)),
        help="most values (objects, arrays and scalars) in one replayed state "
        "(env STATETRAIL_MAX_STATE_NODES; default %(default)s)",
    )
    parser.add_argument(
        "--max-state-depth", type=_state_depth_argument,
        default=env("MAX_STATE_DEPTH", str(DEFAULT_LIMITS.max_depth)),
        help=f"deepest nesting of objects and arrays in one replayed state, at most "
        f"{MAX_JSON_DEPTH} (env STATETRAIL_MAX_STATE_DEPTH; default %(default)s)",
    )
    parser.add_argument(
        "--retain", type=_retention_argument, default=env("RETAIN", "") or None,
        help="delete traces whose newest span ended longer ago than this, e.g. 30d "
        "(units h, d, w; env STATETRAIL_RETAIN; default: keep everything)",
    )
    parser.add_argument(
        "--prune-every", type=_duration_argument, default=env("PRUNE_EVERY", "10m"),
        help="how often the retention pruner runs, e.g. 10m "
        "(units s, m, h, d, w; env STATETRAIL_PRUNE_EVERY; default 10m)",
    )


def _add_connection_limit_arguments(
    parser: argparse.ArgumentParser, env: Callable[[str, str], str]
) -> None:
    """The HTTP port's limits on slow clients (docs/limits.md)."""
    parser.add_argument(
        "--head-timeout", type=_positive_seconds, default=env("HEAD_TIMEOUT", "10"),
        help="seconds a client has to send a request's head (line and headers) before the "
        "connection is closed with 408 (env STATETRAIL_HEAD_TIMEOUT; default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout", type=_positive_int, default=env("IDLE_TIMEOUT", "5"),
        help="seconds a keep-alive connection may sit idle between requests "
        "(env STATETRAIL_IDLE_TIMEOUT; default %(default)s)",
    )
    parser.add_argument(
        "--upload-grace", type=_positive_seconds, default=env("UPLOAD_GRACE", "5"),
        help="seconds an OTLP/HTTP body may take before the minimum rate applies, and the "
        "longest pause within it (env STATETRAIL_UPLOAD_GRACE; default %(default)s)",
    )
    parser.add_argument(
        "--min-upload-kib", type=_positive_int, default=env("MIN_UPLOAD_KIB", "16"),
        help="KiB a second an OTLP/HTTP body must keep up after the grace, or be answered "
        "408 (env STATETRAIL_MIN_UPLOAD_KIB; default %(default)s)",
    )
    parser.add_argument(
        "--max-upload-seconds", type=_positive_seconds,
        default=env("MAX_UPLOAD_SECONDS", "60"),
        help="seconds an OTLP/HTTP body may take in all "
        "(env STATETRAIL_MAX_UPLOAD_SECONDS; default %(default)s)",
    )
    parser.add_argument(
        "--client-share", type=_percent, default=env("CLIENT_SHARE", "50"),
        help="percent of the in-flight byte budget one address or one key may hold "
        "(env STATETRAIL_CLIENT_SHARE; default %(default)s; 100: no share)",
    )


def root_path_argument(text: str) -> str:
    """A --root-path as stored: "" or "/a/b". It is written into every link and cookie
    path, so a query, fragment, space or ".." is refused rather than guessed at."""
    stripped = text.strip().rstrip("/")
    if not stripped:
        return ""
    segments = stripped.split("/")
    if (
        not stripped.startswith("/")
        or any(segment in ("", ".", "..") for segment in segments[1:])
        or not _ROOT_PATH.fullmatch(stripped)
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a path prefix: write it like /statetrail or /tools/statetrail "
            "(letters, digits and - . _ ~ between slashes)"
        )
    return stripped


_ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")


def add_db_argument(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    parser.add_argument(
        "--db", type=Path, default=Path(environ.get("STATETRAIL_DB", DEFAULT_DB)),
        help="DuckDB file (env STATETRAIL_DB; default %(default)s)",
    )


def serve_config(args: argparse.Namespace) -> Config:
    password = args.studio_password
    if password is None and args.studio_password_file is not None:
        password = _read_password(args.studio_password_file)
    interval = args.prune_every / 1e9
    config = Config(
        db_path=args.db,
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        api_keys=_configured_keys(args.api_keys, args.keys_file),
        insecure=args.insecure,
        max_receive_bytes=args.max_receive_mib * MIB,
        max_inflight_requests=args.max_inflight,
        max_backlog_bytes=args.max_backlog_mib * MIB,
        duckdb_threads=args.duckdb_threads,
        extraction_worker=args.extraction_worker,
        auth=args.auth,
        studio_password=password,
        login_failures=args.login_failures,
        login_failures_global=args.login_failures_global,
        login_window_seconds=args.login_window / 1e9,
        forwarded_allow_ips=args.forwarded_allow_ips,
        retain_nanos=args.retain,
        root_path=args.root_path,
        document_limits=DocumentLimits(
            max_bytes=args.max_state_mib * MIB,
            max_nodes=args.max_state_nodes,
            max_depth=args.max_state_depth,
        ),
        prune_interval_seconds=interval,
        # The first pass comes soon after start (a server restarted after a long
        # pause catches up at once), but not during start-up itself.
        prune_first_delay_seconds=min(interval, 30.0),
        head_timeout_seconds=args.head_timeout,
        idle_timeout_seconds=args.idle_timeout,
        upload_grace_seconds=args.upload_grace,
        min_upload_bytes_per_second=args.min_upload_kib * 1024,
        max_upload_seconds=args.max_upload_seconds,
        client_share=args.client_share / 100,
    )
    config.check_exposure()
    config.check_studio_access()
    return config


def _configured_keys(flags: list[str], keys_file: Path | None) -> frozenset[str]:
    """The --api-key flags plus the keys file's keys (one per line, # comments)."""
    keys = set(flags)
    if keys_file is not None:
        try:
            text = keys_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the keys file {keys_file}: {exc}") from exc
        keys.update(key for line in text.splitlines() if (key := line.split("#", 1)[0].strip()))
    return frozenset(keys)


def _read_password(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the studio password file {path}: {exc}") from exc
    password = lines[0].strip() if lines else ""
    if not password:
        raise ConfigError(f"the studio password file {path} is empty")
    return password


def _duration_argument(text: str) -> int:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _retention_argument(text: str) -> int:
    try:
        return parse_duration(text, RETENTION_UNITS)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _forwarded_allow_ips(text: str) -> tuple[str, ...]:
    """The trusted proxies as a tuple: "*", or addresses and networks (10.0.0.0/8)."""
    entries = tuple(entry.strip() for entry in text.split(",") if entry.strip())
    for entry in entries:
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{entry!r} is not an address or network: write e.g. 127.0.0.1,10.0.0.0/8 "
                "(or * to believe any client's headers)"
            ) from exc
    return entries


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _percent(text: str) -> int:
    value = _positive_int(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 1 to 100")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value
def _state_depth_argument(text: str) -> int:
    depth = _positive_int(text)
    if depth > MAX_JSON_DEPTH:
        # Deeper than the parse-side cap, which every recursive walker relies on.
        raise argparse.ArgumentTypeError(f"{text!r} is over {MAX_JSON_DEPTH}, the deepest allowed")
    return depth


def _optional_path(value: str) -> Path | None:
    return Path(value) if value else None

