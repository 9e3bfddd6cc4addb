"""Build the small Llama-architecture demo model locally, with no hub access.

The model is a 2-layer Llama (hidden 256, MLP 512, 4 heads, vocabulary 1000, 2048 positions,
about 1.8 M float32 parameters, about 7 MB on disk) with seeded random weights, plus a byte-level
BPE tokenizer trained on the spot on a short built-in English text. vLLM's CPU build loads it
offline (``HF_HUB_OFFLINE=1``); its output is noise, but deterministic noise.
Usage: ``python -m neuronbuild.demo.model OUT_DIR [--seed N]``.
"""

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

MARKER = ".neuronbuild-demo-complete"
"""Written last into the model folder; a folder without it is rebuilt."""

VOCAB_SIZE = 1000
BOS, EOS = "<s>", "</s>"

_TEXT = """\
The quick brown fox jumps over the lazy dog. A small model can still say hello to the world.
Hello, my name is Ada and I like to read books about the sea, the sky and the stars at night.
Once upon a time there was a little town by a river, where people baked bread every morning.
The weather today is sunny with a light wind from the west, and tomorrow it may rain again.
Machines learn patterns from text: words, numbers, punctuation and the spaces in between them.
She opened the window, looked at the garden and said that the flowers were finally in bloom.
We compile the graphs ahead of time, store them by their content and serve them without waiting.
One, two, three, four, five, six, seven, eight, nine, ten. Monday, Tuesday, Wednesday, Friday.
"""


def _is_complete(out_dir: Path, seed: int) -> bool:
    """True when ``out_dir`` holds a finished build for ``seed`` (its marker names the seed)."""
    try:
        return bool(json.loads((out_dir / MARKER).read_text())["seed"] == seed)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _transformers() -> Any:
    """``transformers``, typed loosely (its classes are untyped calls under ``mypy --strict``)."""
    return importlib.import_module("transformers")


def _train_tokenizer() -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast``: VOCAB_SIZE ids, ``<s>`` = 0, ``</s>`` = 1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TEXT.splitlines(), trainer=trainer)
    # Pad with plain added tokens so every id the model can emit decodes to something.
    tok.add_tokens([f"<unused{i}>" for i in range(tok.get_vocab_size(), VOCAB_SIZE)])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0), (EOS, 1)]
    )
    return _transformers().PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=EOS, model_max_length=2048
    )


def build_demo_model(out_dir: Path, seed: int = 0) -> Path:
    """Build (or reuse) the demo model in ``out_dir`` and return ``out_dir``.

    Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (float32 weights,
    about 7 MB), the tokenizer files and, last, the completion marker. A folder whose marker
    names the same ``seed`` is returned untouched; anything else is (re)built in place.
    The same ``seed`` gives byte-identical ``model.safetensors`` and tokenizer files.
    """
    out_dir = Path(out_dir)
    if _is_complete(out_dir, seed):
        return out_dir
    import torch

    tf = _transformers()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).unlink(missing_ok=True)
    config = tf.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = tf.LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    _train_tokenizer().save_pretrained(out_dir)
    (out_dir / MARKER).write_text(json.dumps({"seed": seed}) + "\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """CLI: build the demo model into OUT_DIR and print its path."""
    parser = argparse.ArgumentParser(prog="python -m neuronbuild.demo.model", description=__doc__)
    parser.add_argument("out_dir", type=Path, help="folder to build the model into")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    args = parser.parse_args(argv)
    print(build_demo_model(args.out_dir, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
