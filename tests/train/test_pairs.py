"""The label-free pair builder on hand-made sections: headings against their own bodies, hard
negatives from both channels that are never the body, and no dev-set question among the pairs."""

from ragdx.train.pairs import SectionText, build_groups, normalise

SECTIONS = [
    SectionText("s1", "a", ("Server Configuration",),
                "The server reads its settings from one file at start. Each setting has a name and a value. "
                "Changes need a reload."),
    SectionText("s2", "a", ("Server Configuration", "Connection Limits"),
                "The maximum number of connections defaults to one hundred. Raising it needs more shared memory."),
    SectionText("s3", "b", ("Backups", "Restoring a Dump File"),
                "A dump file is restored with the restore tool. The target database must exist first."),
    SectionText("s4", "b", ("Backups", "Description"), "Backups protect the data against loss of the disk."),
    SectionText("s5", "b", ("Backups", "How do I restore a dump?"), "Run the restore tool on the dump file you made."),
    SectionText("s6", "b", ("Backups", "Why is my dump slow?"), "Large tables take most of the time to copy."),
]
BM25 = {"Connection Limits": ["s2", "s1", "s3"], "Server Configuration": ["s2", "s3"],
        "How do I restore a dump?": ["s1"], "Why is my dump slow?": ["s2"]}
DENSE = {"Connection Limits": ["s4", "s3"]}
CHANNELS = {"bm25": lambda q: BM25.get(q, []), "dense": lambda q: DENSE.get(q, [])}
DEV_QUESTION = "How do I restore a dump?"


def _groups(**kwargs):
    dropped: dict[str, int] = {}
    found = build_groups(SECTIONS, CHANNELS, forbidden=[DEV_QUESTION], neighbours=0, random_negative=False,
                         dropped=dropped, **kwargs)
    return found, dropped


def test_headings_are_paired_with_their_own_bodies_against_other_sections_hard_negatives():
    found, _ = _groups()
    got = [(g.query, g.positive, g.negatives, g.kind, g.sources) for g in found]
    assert got == [
        # no parent heading: the sentence alone; s2 is below s1 (same document), so bm25's s3 is the negative
        ("Server Configuration", "The server reads its settings from one file at start.",
         ("Backups: The target database must exist first.",), "heading", ("bm25",)),
        ("Server Configuration", "Each setting has a name and a value.",
         ("Backups: The target database must exist first.",), "heading", ("bm25",)),
        # read after the parent's heading, never its own; its own section and its parent are skipped
        ("Connection Limits", "Server Configuration: The maximum number of connections defaults to one hundred.",
         ("Backups: The target database must exist first.", "Backups protect the data against loss of the disk."),
         "heading", ("bm25", "dense")),
        ("Connection Limits", "Server Configuration: Raising it needs more shared memory.",
         ("Backups: The target database must exist first.", "Backups protect the data against loss of the disk."),
         "heading", ("bm25", "dense")),
        # an FAQ-style heading is a question; "Description" is generic; s3 has no negative
        ("Why is my dump slow?", "Backups: Large tables take most of the time to copy.",
         ("Server Configuration: Raising it needs more shared memory.",), "question", ("bm25",)),
    ]


def test_a_hard_negative_is_never_the_body_of_its_own_section():
    found, _ = _groups(positives=5)
    for g in found:
        own = next(s for s in SECTIONS if s.section_id == g.section_id)
        assert not any(n.split(": ", 1)[-1] in own.body for n in g.negatives), g


def test_no_dev_set_question_is_among_the_pairs():
    found, dropped = _groups()
    assert dropped == {"forbidden": 1}
    assert normalise(DEV_QUESTION) not in {normalise(g.query) for g in found}
    assert all(DEV_QUESTION not in (g.positive, *g.negatives) for g in found)
    unguarded = build_groups(SECTIONS, CHANNELS, neighbours=0, random_negative=False)
    assert [g.query for g in unguarded].count(DEV_QUESTION) == 1  # the guard is what drops it


def test_a_labelled_question_gives_one_group_per_stated_sentence_against_the_read_ones_that_state_none():
    from ragdx.train.pairs import task_groups
    texts = ["A: first", "B: second", "C: third", "D: fourth", "E: fifth", "F: sixth"]
    stated = [False, True, False, False, True, True]
    found = task_groups("how?", texts, stated, read=4, negatives=2, positives_from=5, source="q1")
    # positives among the 5 first (not F); negatives among the 4 read, the 2 first (not D)
    assert [(g.query, g.positive, g.negatives, g.kind, g.section_id) for g in found] == [
        ("how?", "B: second", ("A: first", "C: third"), "fit", "q1"),
        ("how?", "E: fifth", ("A: first", "C: third"), "fit", "q1"),
    ]
    assert found[0].sources == ("candidate", "candidate")
    # nothing read states nothing: no negatives, no group; nothing stated: no group
    assert task_groups("how?", texts[:2], [True, True]) == []
    assert task_groups("how?", texts, [False] * 6) == []
