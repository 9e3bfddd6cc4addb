"""Claims of :mod:`neuronbuild.engines.neuron.buckets` that one-line breaks left standing (issue
46 item 18): a decode context list that fails the list checks is named once, never read further
(a misordered list is not also told its entries are too long, a non-integer entry is no crash);
every problem of a recipe is named at once, a decode one beside a prefill one; and a refused
segmented-prefill configuration does not draw a second, wrong error saying its prefill is single
shot and so cannot keep prefix caching."""

from __future__ import annotations

from neuronbuild.engines.neuron.buckets import resolve_buckets
from tests.engines.test_claims_buckets import NC, arguments, refused

CTX = f"{NC}.decode_context_length_buckets"


def test_a_misordered_decode_context_list_is_named_once_not_entry_by_entry() -> None:
    # Both entries are also >= max_model_len (4096): the order error alone is reported.
    assert refused({"decode_context_length_buckets": [8192, 4096]}) == [CTX]


def test_a_non_integer_decode_context_bucket_is_refused_by_position_not_a_crash() -> None:
    assert refused({"decode_context_length_buckets": ["1024"]}) == [f"{CTX}[0]"]
    assert refused({"decode_context_length_buckets": "1024"}) == [CTX]


def test_a_decode_bucket_error_is_reported_beside_a_prefill_one() -> None:
    fields = refused({"num_seqs_buckets": [2, 4]}, max_num_batched_tokens=3072)
    assert fields == ["max_num_batched_tokens", f"{NC}.num_seqs_buckets"]
    fields = refused({"decode_context_length_buckets": [1000]}, max_num_batched_tokens=3072)
    assert fields == ["max_num_batched_tokens", f"{CTX}[0]"]


def test_a_refused_segment_size_draws_no_single_shot_prefix_caching_error() -> None:
    """An unsupported segment size leaves no segments resolved; that is not single-shot prefill,
    so prefix caching (on by default) is not blamed beside it."""
    _, errors = resolve_buckets(
        arguments({"kv_segment_size_buckets": [1000]}, enable_prefix_caching=None)
    )
    assert [e.field for e in errors] == [f"{NC}.kv_segment_size_buckets[0]"]
    assert not [e for e in errors if "single-shot" in e.hint]
