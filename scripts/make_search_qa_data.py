#!/usr/bin/env python3
"""Generate the bundled SearchQA benchmark: an invented world no language model can know.

Writes ``data/search_qa/{corpus,train,test}.jsonl`` deterministically (same bytes for the same seed):

* ``corpus.jsonl`` -- Search-R1 corpus format, one passage per line: ``{"id", "contents"}`` with
  ``contents = '"Title"\\ntext'``. People, cities, kingdoms, rivers, mountain ranges, guilds and inventions
  of an invented world, each with a main passage holding its key facts, plus secondary passages and
  event passages that mention the same names (distractors for the retriever).
* ``train.jsonl`` / ``test.jsonl`` -- FlashRAG format ``{"id", "question", "golden_answers",
  "data_source", "metadata"}``; ``metadata`` holds ``hops`` (1, 2 or 3 searches needed), ``type`` (the
  question template), ``supporting_titles`` / ``supporting_doc_ids`` (the gold passages in hop order)
  and ``oracle_queries`` (one search per hop that retrieves the gold passage).

A second world from another seed, whose name tokens are disjoint from the first world's, is written to
``unseen/corpus.jsonl`` and ``unseen/test_unseen.jsonl`` (500 questions, no train split): the SearchQA split
``test_unseen``, which no model can answer from what the ``train`` questions showed it.

Every name is made of invented syllables, so the answers cannot be guessed without searching. Each fact a
question asks about is stated in exactly one passage. Usage::

    python scripts/make_search_qa_data.py            # writes data/search_qa/ (both worlds)
    python scripts/make_search_qa_data.py --out DIR --seed 7 --unseen-seed 8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DATA_SOURCE = "stratagym_world"

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "th", "tr", "vr", "sk", "qu"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "th", "x", "nd", "rk"]

PROFESSIONS = ["cartographer", "glassblower", "astronomer", "shipwright", "herbalist", "archivist", "clockmaker",
               "stonemason", "weaver", "chronicler", "alchemist", "bridge engineer", "falconer", "luthier",
               "bell founder", "lens grinder", "salt merchant", "dye maker", "beekeeper", "map engraver"]
EXPORTS = ["amber", "copper wire", "blue dye", "salted fish", "wool", "glass beads", "cedar planks", "honey",
           "iron nails", "paper", "lamp oil", "river pearls", "slate", "barley", "wax candles", "silk thread"]
INVENTION_NOUNS = ["loom", "orrery", "water clock", "lantern", "compass", "printing press", "windmill", "kiln",
                   "telescope", "bellows", "sextant", "pump", "plough", "hourglass", "crane", "sundial"]
GUILD_KINDS = ["Guild", "Order", "Brotherhood", "Society", "League", "Circle"]
EVENT_KINDS = ["festival", "flood", "treaty", "fair", "siege", "council", "eclipse", "tournament"]
HOP_LIMITS = {1: 0.40, 2: 0.34, 3: 0.26}  # share of each split per hop count
UNSEEN_SEED = 70913  # the unseen-world split's world
UNSEEN_SPLIT = "test_unseen"
UNSEEN_ID_PREFIX = "u"
UNSEEN_DATA_SOURCE = "stratagym_world_unseen"


@dataclass
class Entity:
    kind: str
    name: str
    facts: dict = field(default_factory=dict)
    doc_ids: list = field(default_factory=list)  # main passage first


class NameMaker:
    """Unique pronounceable invented names; no two entities share a name token.

    ``reserved`` holds name tokens (lowercase) of another world that this one must never use: the
    unseen-world split is only unseen if none of its names occurs in the world training showed.
    """

    def __init__(self, rng: random.Random, reserved: set[str] | frozenset[str] = frozenset()):
        self.rng = rng
        self.used: set[str] = set(reserved)

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        for _ in range(10_000):
            n = self.rng.randint(*syllables)
            w = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(n)) + self.rng.choice(CODAS)
            w = w.capitalize()
            if 4 <= len(w) <= 11 and w.lower() not in self.used:
                self.used.add(w.lower())
                return w
        raise RuntimeError("ran out of names")


def build_world(rng: random.Random, scale: float = 1.0, names: NameMaker | None = None) -> dict[str, list[Entity]]:
    names = names if names is not None else NameMaker(rng)
    n = lambda x: max(2, int(round(x * scale)))  # noqa: E731
    mountains = [Entity("mountain", f"{names.word()} Mountains") for _ in range(n(20))]
    rivers = [Entity("river", f"{names.word()} River", {"mountains": rng.choice(mountains)}) for _ in range(n(45))]
    first_names = [names.word((1, 2)) for _ in range(n(160))]
    people = []
    for _ in range(n(800)):
        people.append(Entity("person", f"{rng.choice(first_names)} {names.word()}"))
    kingdoms = [Entity("kingdom", names.word()) for _ in range(n(28))]
    for k in kingdoms:
        k.facts["ruler"] = people.pop()
        k.facts["ruler"].facts["rules"] = k
    cities = []
    for _ in range(n(200)):
        c = Entity("city", names.word(), {"kingdom": rng.choice(kingdoms), "river": rng.choice(rivers),
                                          "founded": rng.randint(120, 900), "export": rng.choice(EXPORTS)})
        cities.append(c)
    for k in kingdoms:
        own = [c for c in cities if c.facts["kingdom"] is k]
        k.facts["capital"] = own[0] if own else rng.choice(cities)
    guilds = []
    for _ in range(n(60)):
        g = Entity("guild", f"{rng.choice(GUILD_KINDS)} of {names.word()}", {"seat": rng.choice(cities)})
        guilds.append(g)
    founders = rng.sample(people, len(guilds))
    for g, p in zip(guilds, founders):
        g.facts["founder"] = p
        g.facts["founded"] = rng.randint(900, 1400)
    inventions = []
    for p in rng.sample(people, n(150)):
        inv = Entity("invention", f"{names.word()} {rng.choice(INVENTION_NOUNS)}",
                     {"inventor": p, "year": rng.randint(1000, 1600), "city": rng.choice(cities)})
        p.facts["invention"] = inv
        inventions.append(inv)
    for p in people + [k.facts["ruler"] for k in kingdoms]:
        p.facts.setdefault("city", rng.choice(cities))
        p.facts.setdefault("guild", rng.choice(guilds))
        p.facts.setdefault("born", rng.randint(950, 1550))
        p.facts.setdefault("profession", rng.choice(PROFESSIONS))
    rulers = [k.facts["ruler"] for k in kingdoms]
    return {"mountain": mountains, "river": rivers, "person": people + rulers, "kingdom": kingdoms,
            "city": cities, "guild": guilds, "invention": inventions}


def surname(p: Entity) -> str:
    return p.name.split()[-1]


def write_passages(world: dict[str, list[Entity]], rng: random.Random, id_prefix: str = "") -> list[dict]:
    """The corpus; ``id_prefix`` keeps the ids of a second world's corpus apart from the first's (an overlap
    audit compares supporting passages by id)."""
    docs: list[dict] = []

    def add(e: Entity | None, title: str, text: str) -> None:
        doc_id = f"{id_prefix}{len(docs)}"
        docs.append({"id": doc_id, "contents": f'"{title}"\n{text}'})
        if e is not None:
            e.doc_ids.append(doc_id)

    for m in world["mountain"]:
        add(m, m.name, f"The {m.name} are a range of cold peaks. Shepherds cross the {m.name} only in summer, "
                       f"and several rivers rise in the {m.name}.")
    for r in world["river"]:
        mtn = r.facts["mountains"].name
        add(r, r.name, f"The {r.name} is a long river. The {r.name} rises in the {mtn} and runs to the sea, "
                       f"carrying barges of timber and grain.")
    for k in world["kingdom"]:
        ruler, cap = k.facts["ruler"], k.facts["capital"]
        add(k, k.name, f"{k.name} is a kingdom of the invented world. The kingdom of {k.name} is ruled by "
                       f"{ruler.name}, who holds court in {cap.name}.")
        add(k, k.name, f"The people of {k.name} keep old customs: every spring the kingdom of {k.name} holds "
                       f"a census, and its coins show a {rng.choice(['heron', 'bear', 'key', 'wheel', 'star'])}.")
    for c in world["city"]:
        f = c.facts
        add(c, c.name, f"{c.name} is a city in the kingdom of {f['kingdom'].name}. The {f['river'].name} flows "
                       f"through {c.name}, which was founded in the year {f['founded']}.")
        add(c, c.name, f"{c.name} trades mostly in {f['export']}. Travellers describe the markets of {c.name} "
                       f"as crowded, and its walls as older than its bridges.")
    for g in world["guild"]:
        f = g.facts
        add(g, g.name, f"The {g.name} is a guild with its seat in {f['seat'].name}. The {g.name} was founded "
                       f"by {f['founder'].name} in the year {f['founded']}.")
        add(g, g.name, f"Members of the {g.name} meet twice a year. The {g.name} keeps a library of ledgers "
                       f"and admits new members after a long apprenticeship.")
    for inv in world["invention"]:
        f = inv.facts
        add(inv, f"The {inv.name}", f"The {inv.name} was invented by {f['inventor'].name}. The first {inv.name} "
                                    f"was built in the year {f['year']} in a workshop of {f['city'].name}.")
    for p in world["person"]:
        f = p.facts
        s = surname(p)
        add(p, p.name, f"{p.name} was a {f['profession']} born in the city of {f['city'].name} in the year "
                       f"{f['born']}. {s} joined the {f['guild'].name} as a young apprentice.")
        extra = f"{p.name} is remembered in songs and chronicles."
        if "invention" in f:
            extra += f" {s} invented the {f['invention'].name}."
        if "rules" in f:
            extra += f" {s} became ruler of the kingdom of {f['rules'].name}."
        add(p, p.name, extra + f" Late in life {s} wrote letters about {rng.choice(EXPORTS)} and {rng.choice(PROFESSIONS)}s.")
    # Event passages: distractors that mention people and cities without stating the asked facts.
    people, cities = world["person"], world["city"]
    for i in range(len(people) // 2):
        kind = rng.choice(EVENT_KINDS)
        c = rng.choice(cities)
        a, b = rng.sample(people, 2)
        year = rng.randint(1000, 1600)
        title = f"{kind.capitalize()} of {c.name} ({year})"
        add(None, title, f"The {kind} of {c.name} in {year} was attended by {a.name} and {b.name}. "
                         f"Chroniclers disagree on how long the {kind} lasted.")
    return docs


def _answers_river(r: Entity) -> list[str]:
    base = r.name[: -len(" River")]
    return [r.name, base, f"the {r.name}"]


def _answers_kingdom(k: Entity) -> list[str]:
    return [k.name, f"kingdom of {k.name}"]


def _answers_guild(g: Entity) -> list[str]:
    return [g.name, f"the {g.name}"]


def _answers_invention(inv: Entity) -> list[str]:
    return [inv.name, f"the {inv.name}"]


def make_questions(world: dict[str, list[Entity]]) -> list[dict]:
    """Every question the templates allow; each with gold passages and one oracle query per hop."""
    qs: list[dict] = []

    def q(kind: str, question: str, answers: list[str], chain: list[tuple[Entity, str]]) -> None:
        qs.append({
            "question": question,
            "golden_answers": answers,
            "metadata": {
                "hops": len(chain),
                "type": kind,
                "supporting_titles": [e.name if e.kind != "invention" else f"The {e.name}" for e, _ in chain],
                "supporting_doc_ids": [e.doc_ids[0] if not (e.kind == "person" and rel in ("invented", "rules")) else e.doc_ids[1] for e, rel in chain],
                "oracle_queries": [query_for(e, rel) for e, rel in chain],
            },
        })

    for p in world["person"]:
        f = p.facts
        city, guild = f["city"], f["guild"]
        q("birth_city", f"In which city was {p.name} born?", [city.name], [(p, "born")])
        q("guild", f"Which guild did {p.name} join?", _answers_guild(guild), [(p, "guild")])
        q("birth_year", f"In what year was {p.name} born?", [str(f["born"])], [(p, "born")])
        q("birth_river", f"Which river flows through the city where {p.name} was born?", _answers_river(city.facts["river"]),
          [(p, "born"), (city, "river")])
        q("birth_kingdom", f"In which kingdom is the city where {p.name} was born?", _answers_kingdom(city.facts["kingdom"]),
          [(p, "born"), (city, "kingdom")])
        q("guild_founder", f"Who founded the guild that {p.name} joined?", [guild.facts["founder"].name],
          [(p, "guild"), (guild, "founder")])
        q("guild_seat", f"In which city does the guild that {p.name} joined have its seat?", [guild.facts["seat"].name],
          [(p, "guild"), (guild, "seat")])
        q("birth_ruler", f"Who rules the kingdom that contains the city where {p.name} was born?",
          [city.facts["kingdom"].facts["ruler"].name], [(p, "born"), (city, "kingdom"), (city.facts["kingdom"], "ruler")])
        q("birth_river_source", f"In which mountains does the river that flows through the birthplace of {p.name} rise?",
          [city.facts["river"].facts["mountains"].name], [(p, "born"), (city, "river"), (city.facts["river"], "source")])
        founder = guild.facts["founder"]
        if founder is not p:
            q("founder_birth_city", f"In which city was the founder of the guild that {p.name} joined born?",
              [founder.facts["city"].name], [(p, "guild"), (guild, "founder"), (founder, "born")])
        if "invention" in f:
            inv = f["invention"]
            q("invention", f"What did {p.name} invent?", _answers_invention(inv), [(p, "invented")])
            q("invention_year", f"In what year was the invention of {p.name} first built?", [str(inv.facts["year"])],
              [(p, "invented"), (inv, "year")])
            q("invention_city_kingdom", f"In which kingdom lies the city where the invention of {p.name} was first built?",
              _answers_kingdom(inv.facts["city"].facts["kingdom"]), [(p, "invented"), (inv, "city"), (inv.facts["city"], "kingdom")])
    for c in world["city"]:
        q("city_river", f"Which river flows through {c.name}?", _answers_river(c.facts["river"]), [(c, "river")])
        q("city_kingdom", f"In which kingdom is the city of {c.name}?", _answers_kingdom(c.facts["kingdom"]), [(c, "kingdom")])
        q("city_ruler", f"Who rules the kingdom in which {c.name} lies?", [c.facts["kingdom"].facts["ruler"].name],
          [(c, "kingdom"), (c.facts["kingdom"], "ruler")])
    for k in world["kingdom"]:
        q("kingdom_ruler", f"Who rules the kingdom of {k.name}?", [k.facts["ruler"].name], [(k, "ruler")])
    for g in world["guild"]:
        q("guild_founder_direct", f"Who founded the {g.name}?", [g.facts["founder"].name], [(g, "founder")])
    return qs


def query_for(e: Entity, rel: str) -> str:
    """The search an oracle issues for one hop: the entity's name plus the relation's key word."""
    words = {"born": "born city", "guild": "joined guild", "invented": "invented", "rules": "ruler",
             "river": "river flows", "kingdom": "city kingdom", "ruler": "kingdom ruled by",
             "founder": "guild founded by", "seat": "guild seat", "source": "river rises",
             "year": "first built year", "city": "first built workshop"}[rel]
    name = e.name if e.kind != "invention" else f"The {e.name}"
    return f"{name} {words}"


def split_questions(qs: list[dict], rng: random.Random, n_test: int, n_train: int,
                    test_name: str = "test") -> tuple[list[dict], list[dict]]:
    """Stratified by hop count; test and train never share a question. ``test_name`` names the test split
    (in ids and ``metadata.split``)."""
    by_hops: dict[int, list[dict]] = {1: [], 2: [], 3: []}
    for item in qs:
        by_hops[item["metadata"]["hops"]].append(item)
    test: list[dict] = []
    train: list[dict] = []
    for hops, share in HOP_LIMITS.items():
        pool = by_hops[hops]
        rng.shuffle(pool)
        nt, nr = int(round(n_test * share)), int(round(n_train * share))
        test.extend(pool[:nt])
        train.extend(pool[nt : nt + nr])
    rng.shuffle(test)
    rng.shuffle(train)
    for split, items in ((test_name, test), ("train", train)):
        for i, item in enumerate(items):
            item["id"] = f"sqa-{split}-{i:05d}"
            item["data_source"] = DATA_SOURCE
            item["metadata"]["split"] = split
    return train, test


def _write_jsonl(path: Path, rows: list[dict], keys: tuple[str, ...] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for row in rows:
            if keys:
                row = {k: row[k] for k in keys}
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def generate(out: Path, seed: int = 20251, n_test: int = 500, n_train: int = 2500, scale: float = 1.0) -> dict[str, int]:
    rng = random.Random(seed)
    world = build_world(rng, scale)
    docs = write_passages(world, rng)
    qs = make_questions(world)
    train, test = split_questions(qs, rng, n_test, n_train)
    keys = ("id", "question", "golden_answers", "data_source", "metadata")
    _write_jsonl(out / "corpus.jsonl", docs)
    _write_jsonl(out / "train.jsonl", train, keys)
    _write_jsonl(out / "test.jsonl", test, keys)
    return {"passages": len(docs), "train": len(train), "test": len(test)}


#: Words of entity names that are not invented ("Guild of X", "X River", "The X loom").
FIXED_NAME_WORDS = frozenset({"of", "river", "mountains"} | {k.lower() for k in GUILD_KINDS}
                             | {w for noun in INVENTION_NOUNS for w in noun.split()})


def name_tokens(world: dict[str, list[Entity]]) -> set[str]:
    """The invented tokens (lowercase) of every entity name in ``world``."""
    return {w.lower() for ents in world.values() for e in ents for w in e.name.split()} - FIXED_NAME_WORDS


def world_names(seed: int = 20251, scale: float = 1.0) -> set[str]:
    """Every invented name token (lowercase) of the world ``generate(seed=seed, scale=scale)`` writes."""
    rng = random.Random(seed)
    names = NameMaker(rng)
    build_world(rng, scale, names)
    return set(names.used)


def generate_unseen(out: Path, seed: int = UNSEEN_SEED, n_test: int = 500, *, base_seed: int = 20251,
                    scale: float = 1.0) -> dict[str, int]:
    """Write the unseen world: ``out/unseen/corpus.jsonl`` and ``out/unseen/test_unseen.jsonl``.

    A second world from another seed whose name tokens are disjoint from the base world's (the world
    ``train`` and ``test`` come from), so nothing a model learned about the base world's entities answers
    any of its questions: the split measures searching and reading, not memory. Its passage ids carry the
    prefix ``u`` and its question ids ``sqa-test_unseen-``, so neither collides with the base world's.
    It has no train split: it exists only to be evaluated on.
    """
    reserved = world_names(base_seed, scale)
    rng = random.Random(seed)
    names = NameMaker(rng, reserved)
    world = build_world(rng, scale, names)
    docs = write_passages(world, rng, id_prefix=UNSEEN_ID_PREFIX)
    qs = make_questions(world)
    _, test = split_questions(qs, rng, n_test, 0, test_name=UNSEEN_SPLIT)
    for item in test:
        item["data_source"] = UNSEEN_DATA_SOURCE
    shared = name_tokens(world) & reserved
    if shared:  # cannot happen (reserved names are never drawn); a guard against a future edit
        raise RuntimeError(f"the unseen world reuses base-world names: {sorted(shared)[:5]}")
    keys = ("id", "question", "golden_answers", "data_source", "metadata")
    _write_jsonl(out / "unseen" / "corpus.jsonl", docs)
    _write_jsonl(out / "unseen" / f"{UNSEEN_SPLIT}.jsonl", test, keys)
    return {"unseen_passages": len(docs), UNSEEN_SPLIT: len(test)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "data" / "search_qa")
    ap.add_argument("--seed", type=int, default=20251)
    ap.add_argument("--test", type=int, default=500)
    ap.add_argument("--train", type=int, default=2500)
    ap.add_argument("--unseen-seed", type=int, default=UNSEEN_SEED, help="seed of the unseen-world split")
    ap.add_argument("--unseen-test", type=int, default=500, help="questions in the unseen-world split (0: skip it)")
    args = ap.parse_args()
    sizes = generate(args.out, args.seed, args.test, args.train)
    if args.unseen_test:
        sizes.update(generate_unseen(args.out, args.unseen_seed, args.unseen_test, base_seed=args.seed))
    print(json.dumps(sizes))


if __name__ == "__main__":
    main()
