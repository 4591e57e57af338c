"""The embedded model: a real tokenizer and a real Qwen2-architecture model built offline in seconds.

Nothing may be downloaded while tests or the demo run, so the project builds its own: a byte-level BPE
tokenizer trained on `aci/assets/corpus.txt` (shipped text), a ChatML chat template with
`{% generation %}` markers (so TRL's assistant-only loss works), and a model from a config. The loading
code everywhere else stays the real `from_pretrained` path: these folders look exactly like a hub model.

Sizes: "test" (~150 KB: fast enough for every unit test to train, merge and serve it) and "demo"
(~0.5 M parameters, 2 MB: big enough to learn the demo's toy task on a 2-core CPU in minutes).
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "assets" / "corpus.txt"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT = "<|im_end|>"

# ChatML with generation markers around assistant content; hermes-style tool calls and tool results.
CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You may call tools. Tools: {{ tools | tojson }}\n"
    "Answer a call as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if tools and loop.first and message['role'] == 'system' %}"
    "{% elif message['role'] == 'assistant' %}<|im_start|>assistant\n{% generation %}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "{% set fn = call['function'] if call.get('function') else call %}"
    "<tool_call>{\"name\": \"{{ fn['name'] }}\", \"arguments\": "
    "{{ fn['arguments'] if fn['arguments'] is string else fn['arguments'] | tojson }}}</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>{% endgeneration %}{{ '\\n' }}"
    "{% elif message['role'] == 'tool' %}<|im_start|>user\n<tool_response>{{ message['content'] }}</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SIZES = {
    "test": dict(vocab=600, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512),
    # Two layers learn the demo's copy/reverse/swap task in a few hundred steps on two CPU cores.
    "demo": dict(vocab=1000, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=1024),
}

# Qwen2's pre-tokenizer (as transformers' Qwen2Tokenizer builds it): digits one by one, words with an
# optional leading non-letter, punctuation runs, newlines.
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def build_tokenizer(out_dir: str | Path, vocab: int = 600):
    """Train the BPE tokenizer on the shipped corpus and save it (with the chat template) to `out_dir`.

    It is trained behind Qwen2's pre-tokenizer and names `Qwen2Tokenizer` as its class. That matters because transformers 5 loads a qwen2 model's tokenizer through `Qwen2Tokenizer`, which
    rebuilds Qwen2's pre-tokenizer and ignores the one saved in tokenizer.json, while a loader that takes
    the saved class (or transformers 4.57's fast tokenizer) uses the saved one: with plain byte-level
    splitting the two disagree on digits (' 45' vs ' ', '4', '5'), so a model trained through one and
    evaluated through the other sees different tokens. With Qwen2's splitting they agree.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(CORPUS)], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOT, pad_token="<|endoftext|>", bos_token=None, unk_token=None,
        model_max_length=4096, model_input_names=["input_ids", "attention_mask"],
    )
    fast.chat_template = CHATML_TEMPLATE
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    # Older transformers read the template from tokenizer_config.json only; newer ones from a .jinja file.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHATML_TEMPLATE
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return fast


def build_model(out_dir: str | Path, size: str = "test", seed: int = 0) -> Path:
    """Build tokenizer + randomly initialised model + generation config into `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = dict(SIZES[size])
    out = Path(out_dir)
    tok = build_tokenizer(out, spec.pop("vocab"))
    eot, pad = tok.convert_tokens_to_ids(EOT), tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tok), tie_word_embeddings=True, eos_token_id=eot, pad_token_id=pad, bos_token_id=None,
        torch_dtype="float32", **spec,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=[eot, pad], pad_token_id=pad, do_sample=False,
                                               max_new_tokens=64)
    model.save_pretrained(out, safe_serialization=True)
    return out


if __name__ == "__main__":
    import sys

    print(build_model(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "test"))
