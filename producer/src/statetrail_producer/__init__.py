"""statetrail-producer: emit the statetrail state-evidence convention (docs/convention.md).

`StateJournal` records any store; `statetrail_producer.langgraph.trace_graph` and
`statetrail_producer.llama_index.trace_workflow` record LangGraph graphs and LlamaIndex
workflows (their frameworks are imported only by those modules).
"""

from statetrail_producer.canonical import Policy, canonical_json, digest
from statetrail_producer.journal import JournalError, StateJournal
from statetrail_producer.keys import CONVENTION_VERSION_NUMBER

__all__ = [
    "CONVENTION_VERSION_NUMBER",
    "JournalError",
    "Policy",
    "StateJournal",
    "canonical_json",
    "digest",
]
