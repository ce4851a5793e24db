"""What a storing process loads, in a fresh interpreter (imports are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# Stores one export (DuckDB scans the write's Arrow tables) and reads it back,
# then lists the shared libraries this process maps.
PROBE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from support.otlp_craft import new_span_id, new_trace_id, plain_request
    from collector.encode.exports import batch_from_export
    from collector.store import Store

    store = Store(Path(sys.argv[1]) / "libraries.duckdb")
    trace_id = new_trace_id()
    request = plain_request(trace_id, [new_span_id()], start_unix_nano=1, end_unix_nano=2)
    store.write([batch_from_export(request.SerializeToString())])
    assert len(store.spans_of_trace(trace_id.hex())) == 1
    assert store.counts()["spans"] == 1
    store.close()
    with open("/proc/self/maps") as maps:
        print(" ".join(sorted({Path(line.split()[-1]).name for line in maps if "/" in line})))
    """
)


def test_storing_loads_none_of_arrows_dataset_libraries(tmp_path: Path) -> None:
    # DuckDB would import pyarrow.dataset on its first Arrow scan, and with it
    # Parquet, Acero, Substrait and the cloud filesystems: 22 MB of the server's RSS.
    tests = Path(__file__).parent
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), str(tests)],
        capture_output=True,
        text=True,
        check=True,
    )
    libraries = result.stdout.split()
    assert any(name.startswith("lib.cpython") for name in libraries)  # pyarrow's own
    assert any(name.startswith("_duckdb") for name in libraries)
    # pyarrow's library links the C++ ones, mapped but untouched; these Python
    # extensions are what would load (and use) them.
    unwanted = ("_dataset.", "_parquet.", "_acero.", "_substrait.", "_s3fs.", "_gcsfs.")
    assert not [name for name in libraries if name.startswith(unwanted)]
