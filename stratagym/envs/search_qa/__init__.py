"""Retrieval QA (Search-R1 protocol): datasets, retrievers (bm25s / Pyserini / dense E5 + faiss), index
building, a Search-R1-compatible retrieval server, the ``stratagym/SearchQA-v0`` env and its scripted
agents. Import-light: only the registry is imported here; everything else loads when used.
"""

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.registry import EnvSpec

ENV_SPECS = [
    EnvSpec(
        cli="stratagym.envs.search_qa.cli",
        id="stratagym/SearchQA-v0",
        entry_point="stratagym.envs.search_qa.env:SearchQAEnv",
        description="Retrieval QA with <search>/<answer> turns (Search-R1 protocol); reward = exact match. "
        "Default: bundled invented-world benchmark, bm25s top-3, 4 search rounds + a final answer turn.",
        requires=("bm25s",),
        extra="search",
        tools=("search",),
        prompt_template="search_r1",
        primary_metric="em",
        record_info_keys=("f1", "em", "substring_em", "answer", "overlap"),
        # exact match, token F1 and substring EM of the final answer; the share of questions that overlap
        # the train split, and EM on the overlapping questions and on the rest (em/overlap, em/no_overlap)
        metrics=(MetricSpec("em", "rate"), MetricSpec("f1", "mean"), MetricSpec("substring_em", "rate"),
                 MetricSpec("overlap", "rate", parts=("overlap", "no_overlap"))),
        # the protocol fingerprint (docs/protocol.md): bump behaviour_version with every change to what
        # the env does; paths are compared by the content protocol_data() hashes
        behaviour_version=1,
        # ``hops`` selects questions, as ``split`` does: the record's ``tasks`` field (count and hash of the
        # task ids) carries which were measured, so old records keep their fingerprints
        neutral_kwargs=("retrieval_timeout", "retrieval_retries", "hops"),
        # the search-dependence probe counts only when set: a plain eval keeps every earlier record's protocol
        set_only_kwargs=("retrieval_ablation",),
        data_kwargs=("dataset", "corpus", "index", "retrieval_urls", "dense_model"),
        reward="exact_match (stratagym.metrics.exact_match, Search-R1's normalisation)",
        board_columns=("f1", "search_count", "em/no_overlap"),
        # a checkpoint with provenance is measured against the questions it trained on, not the train split
        training_overlap="stratagym.envs.search_qa.overlap:training_overlap",
        agents={
            "oracle": "stratagym.envs.search_qa.agents:OracleAgent",
            "oracle_plan": "stratagym.envs.search_qa.agents:PlanningOracleAgent",
            "no_search": "stratagym.envs.search_qa.agents:NoSearchAgent",
        },
    ),
]
