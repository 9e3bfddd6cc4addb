"""The text the demo model learns, and the prompt the demo asks it.

The two opening paragraphs of Jane Austen's *Pride and Prejudice* (1813, public domain), as
Project Gutenberg's eBook #1342 prints them (chapter 1; other editions differ by a comma or an
"as"). Each paragraph is one training sequence that ends with the end-of-sequence token, so a
greedy answer stops where its paragraph does.
"""

PARAGRAPHS = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he "
    "is considered the rightful property of some one or other of their daughters.",
)

SOURCE = "the opening of Pride and Prejudice (Jane Austen, 1813)"

PROMPT = "It is a truth universally acknowledged, that"
"""The demo's question: a prefix of the first paragraph."""

CONTINUATION = PARAGRAPHS[0][len(PROMPT) :]
"""What a model that learned the text answers to :data:`PROMPT` (greedy): the paragraph's rest,
``' a single man in possession of a good fortune, must be in want of a wife.'``."""

MAX_TOKENS = 32
"""Tokens the demo asks for: more than :data:`CONTINUATION` takes (18 with the demo tokenizer),
so the answer ends at the end-of-sequence token the model learned, not at the limit."""
