"""Learning-rate sense check: a first loss at chance means the model does not know the task's format yet.

A model that predicts the next token uniformly over its vocabulary has a cross-entropy of ln(V): about
11.9 for a 151,936-token Qwen vocabulary. A pretrained base model starts an SFT run far below that (often
1-3 on in-format answers), and the default recipes (`aci.training.request.LEARNING_RATES`, one epoch)
assume it does: they nudge a model that already speaks the format. A first loss near ln(V) says the
opposite: an untrained model (the demo's), or a broken input (weights not loaded, another tokenizer, a
template the model never saw). Either way the defaults would leave it on its plateau, and the agent
should know before spending the budget. Nothing heavy is imported here.
"""

from __future__ import annotations

import math

CHANCE_SHARE = 0.75  # a first loss above this share of ln(V) counts as "at chance"


def chance_loss(vocab_size: int) -> float:
    return math.log(vocab_size)


def at_chance(first_loss: float | None, vocab_size: int | None) -> bool:
    if not first_loss or not vocab_size or vocab_size < 2:
        return False
    return first_loss >= CHANCE_SHARE * chance_loss(vocab_size)


def left(loss: float | None, vocab_size: int | None) -> bool:
    """The loss has fallen below half of chance: the model has left the plateau (the advice's own mark)."""
    return bool(loss) and bool(vocab_size) and vocab_size >= 2 and loss < chance_loss(vocab_size) / 2


def advice(first_loss: float | None, vocab_size: int | None, learning_rate: float | None = None,
           default_rate: float | None = None) -> str | None:
    """What a first loss at chance means for the recipe, in words; None when the first loss is below it.
    `default_rate`: the method's default, so a rate the caller chose is not called the default."""
    if not at_chance(first_loss, vocab_size):
        return None
    c = chance_loss(vocab_size)
    if learning_rate and default_rate and not math.isclose(learning_rate, default_rate):
        recipe = (f"This job's learning rate {learning_rate:g} (chosen, not the default {default_rate:g}) starts "
                  f"from a model that knows nothing of the format: it")
    else:
        rate = f" (learning rate {learning_rate:g})" if learning_rate else ""
        recipe = f"The default recipe{rate} is meant for a pretrained, chat-ready model; from chance it"
    return (f"first loss {first_loss:.2f} sits at chance (ln {vocab_size:,} = {c:.2f}): the model has not learned "
            f"this task's format yet and predicts its tokens as an untrained model would. {recipe} needs many "
            f"more steps and usually a higher learning rate with warmup (`aci demo` trains its untrained model at 1e-3 for "
            f"500-1000 steps). Before training long: check that base_model loads its weights and that the "
            f"tokenizer and template are the model's own (a broken input also reads as chance); then watch the "
            f"loss fall below {c / 2:.1f} within the first few hundred steps, or raise the rate.")
