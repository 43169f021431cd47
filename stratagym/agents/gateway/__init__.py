"""The policy gateway: an OpenAI-compatible server in front of a stratagym policy that records, per
session, the token ids and log-probs it sampled (``stratagym serve policy``; docs/gateway.md).

* :mod:`.server` -- the FastAPI app (chat completions with tools, completions), batching concurrent calls;
* :mod:`.sessions` -- the record of every call, and the append-only check of each call against the
  session's previous one;
* :mod:`.cli` -- ``stratagym serve policy MODEL``.
"""
