"""Close variants (label `close`): rows that closely resemble one specific test item without copying it.

Why: the rule is not to derive training data from specific test items in any way (paraphrasing,
perturbation, seeding generation with them), and a judge reading the data counts close variants, not
only copies; no n-gram of the judge's survives a test item with its names and numbers changed. Matching
the benchmark's style, format, domain or templates is allowed, so what many items share weighs little
here and what is specific to one item (its rare words, names and numbers) decides.

Words are a text's cleaned words (`text.words`); df(w) is how many of the N reference items hold w, and
a number is a word of digits. A row (read in windows of twice the longest item, overlapping by half,
when it is longer, so that a long document cannot gather one item's words from far apart) resembles
an item by
- `story`: the item's words other than numbers, of its question or of all its fields (at least 4): the
  row holds at least 70 % of their weight (1 / df each), also leaving the item's heaviest word out, and
  the specific ones it holds (words of letters that at most 1 % of the items have, or 2) weigh at least
  2, as much as two words no other item has. The same story with names, numbers or some wording changed has all three; a template
  that many items share lacks the last, whatever its numbers;
- `numbers`: the item's numbers, of all its fields, each weighing ln(N / df) (the evidence it gives):
  the row holds at least 3 of them and 70 % of their weight, and that weight is at least ln N + ln 1000
  (by chance, fewer than one item in a thousand would hold them all); or, where the row also holds 30 %
  of the item's story and every number of the item (its question's at least 2), at least ln N: the same numbers
  and operation in another story, or the item's own numbers under other names. Not for the items too
  short for the judge's score: a short item's numbers are `short_close`'s to weigh, in their order and
  with their result, since as a set alone they also match a sibling's (72 - 67 = 5 holds the numbers of
  72 - 5 = 67).

A batch is decided with numpy on the word ids the prefilter already has (the reference's words pinned
in `wordids`): only the words that can make a pair pass (each item's specific words, and its rarest
numbers, enough that a row without them falls short) are looked up, and the few pairs whose bound
still passes are scored in full.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

from aci.contamination.lookup import distinct, distinct_inverse, ranges
from aci.contamination.report import CLOSE_COMPONENTS
from aci.contamination.rules import EPS, MIN_UNIQUE_WORDS

STORY_SHARE = 0.7
SPECIFIC_SHARE, SPECIFIC_DF = 0.01, 2  # a word is specific when at most max(2, 1 % of the items) hold it
SPECIFICITY = 2.0
NUMBERS_SHARE, MIN_NUMBERS = 0.7, 3
CHANCE = math.log(1000)
STORY_WITH_NUMBERS = 0.3
MATCHED_WORDS = 12  # of the words a close row holds of its item, the rarest this many are shown
MIN_STRIDE = 128  # words: windows are twice the longest item, at least this
STORY, NUMBERS = CLOSE_COMPONENTS.index("story"), CLOSE_COMPONENTS.index("numbers")  # a match's component
_NONE = np.iinfo(np.int64).max  # ends a sorted table of cells: no cell equals it


def _flat(sets: list[set[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(owner, key) of every key of a list of key sets, owner ascending."""
    count = np.fromiter(map(len, sets), np.int64, len(sets))
    return np.repeat(np.arange(len(sets)), count), np.fromiter(chain.from_iterable(sets), np.int64, int(count.sum()))


DENSE_CELLS = 1 << 23  # flags in a batch's table of (window, key): 8 MB, kept between batches


def _sorted(have: np.ndarray):
    """Membership in `have` (sorted cells, ending with _NONE)."""
    return lambda cells: have[np.searchsorted(have, cells)] == cells


class Sets:
    """One set of word keys per item with their weights: each item's total, and its heaviest key's weight."""

    def __init__(self, owner: np.ndarray, keys: np.ndarray, weight: np.ndarray, n: int):
        """`owner`, `keys`: each key and its item, grouped by item in ascending order."""
        self.count = np.bincount(owner, minlength=n)
        self.start = np.cumsum(self.count) - self.count
        self.keys, self.w = keys, weight[keys]
        self.total = np.bincount(owner, self.w, n)
        self.top_w = np.zeros(n)
        np.maximum.at(self.top_w, owner, self.w)

    def held(self, holds, win: np.ndarray, item: np.ndarray, n_keys: int, only: np.ndarray | None = None,
             top: bool = False):
        """Per (window, item) pair: the weight and the count of the item's keys (those marked in `only`, when
        given) that the window holds (`holds`: whether each window * n_keys + key cell is held), and, with
        `top`, the heaviest weight held."""
        counts = self.count[item]
        e = ranges(self.start[item], counts)
        pair = np.repeat(np.arange(len(item)), counts)
        found = holds(np.repeat(win * n_keys, counts) + self.keys[e])
        if only is not None:
            found &= only[self.keys[e]]
        heaviest = np.zeros(len(item))
        if top:
            np.maximum.at(heaviest, pair, np.where(found, self.w[e], 0.0))
        return np.bincount(pair, self.w[e] * found, len(item)), np.bincount(pair, found, len(item)), heaviest


class CloseIndex:
    """The reference's words per item, as keys (`key`: word -> its pinned id), and `find` over a batch."""

    def __init__(self, fields: list[tuple[list[str], ...]], key: dict[str, int], short: list[int] = ()):
        """`fields`: each item's question, answer and passage words; `short`: the items whose numbers
        `short_close` weighs (in their order and with their result), not the `numbers` rule here."""
        n, v = len(fields), len(key)
        self.n_items, self.n_keys = n, v
        question = [set(map(key.__getitem__, f[0])) for f in fields]
        every = [dict.fromkeys(map(key.__getitem__, chain.from_iterable(f))) for f in fields]  # in the item's order
        q_owner, q_keys = _flat(question)
        owner, keys = _flat(every)
        self.every, self.every_count = keys, np.bincount(owner, minlength=n)  # each item's distinct words, for `matched`
        self.every_start = np.cumsum(self.every_count) - self.every_count
        df = np.maximum(np.bincount(keys, minlength=v), 1).astype(np.float64)
        number = np.zeros(v + 1, bool)  # per key, and n_keys (a word not in the reference)
        number[[k for w, k in key.items() if w.isdigit()]] = True
        letters = np.zeros(v, bool)  # a word of letters only: not a number, code or escape (u00e9)
        letters[[k for w, k in key.items() if w.isalpha()]] = True
        story_w, evidence = 1.0 / df, np.log(n / df)
        self.evidence, self.number = evidence, number  # per key: what holding it says, and whether it is a number
        self.specific = np.append((df <= max(SPECIFIC_DF, SPECIFIC_SHARE * n)) & letters, False)

        def story(owner: np.ndarray, keys: np.ndarray) -> Sets:  # items with fewer than 4 such words have none
            mine = ~number[keys]
            mine &= (np.bincount(owner[mine], minlength=n) >= MIN_UNIQUE_WORDS)[owner]
            return Sets(owner[mine], keys[mine], story_w, n)

        def numbers(owner: np.ndarray, keys: np.ndarray) -> Sets:  # rarest first; one every item holds says nothing
            mine = number[keys] & (evidence[keys] > 0)
            order = np.lexsort((keys[mine], -evidence[keys[mine]], owner[mine]))
            return Sets(owner[mine][order], keys[mine][order], evidence, n)

        self.q_story, self.all_story = story(q_owner, q_keys), story(owner, keys)
        self.q_numbers, self.all_numbers = numbers(q_owner, q_keys), numbers(owner, keys)
        self.ln_n = math.log(n) if n else 0.0
        nums = self.all_numbers
        counted = (nums.count >= MIN_NUMBERS) & (nums.total >= self.ln_n)
        counted[list(short)] = False
        # story: each item's specific words, looked up in every window
        mine = self.specific[self.all_story.keys]
        self.story_post = Postings(self.all_story.keys[mine], np.repeat(np.arange(n), self.all_story.count)[mine],
                                   story_w[self.all_story.keys[mine]], v)
        # numbers: an item is a candidate where a window holds its rarest number, and then its second rarest
        items = np.flatnonzero(counted)
        self.rarest = Postings(nums.keys[nums.start[items]], items, np.zeros(len(items)), v)
        self.second = np.zeros(n, np.int64)
        self.second[items] = nums.keys[nums.start[items] + 1]
        scored = np.zeros(v + 1, bool)  # the numbers of the items the numbers rule counts, all scored
        scored[nums.keys[counted[np.repeat(np.arange(n), nums.count)]]] = True
        self.scanned = self.specific | scored  # the words each window is read for
        self.checks = (self.all_story.count > 0) | counted  # per item: whether a rule here can find its variants
        self.stride = max(MIN_STRIDE, max((len(s) for s in every), default=0))
        self.dense = np.zeros(DENSE_CELLS, bool)  # `find`'s table, all False between calls

    def find(self, ids: np.ndarray, per_text: np.ndarray, main: np.ndarray):
        """(text, item, component, score, required) of each pair of a `main` text of the batch and an item
        it resembles (the best window's score)."""
        v, n = self.n_keys, self.n_items
        out = (np.zeros(0, np.int64),) * 3 + (np.zeros(0),) * 2
        text_end = np.cumsum(per_text)
        at = np.flatnonzero(self.scanned[np.minimum(ids, v)])
        text = np.searchsorted(text_end, at, "right")
        keep = main[text]
        at, text = at[keep], text[keep]
        if not len(at):
            return out
        width = _width(per_text, self.stride)
        win, key = self._windows(at, ids, per_text, text_end, width, 1, text)
        cells = win * v + key  # every (window, key) of a looked-up word or a number, repeats included
        dense = len(per_text) * width * v <= DENSE_CELLS
        if dense:
            self.dense[cells] = True
            holds = self.dense.__getitem__
        else:
            have = np.append(distinct(cells), _NONE)
            holds = _sorted(have)
        try:
            # story candidates: the specific words they hold weigh enough
            story = distinct(cells[np.flatnonzero(self.specific[key])])  # indices: a mask costs more
            if len(story):
                story, weight = self.story_post.sums(story // v, story % v, n)
                story = story[weight >= SPECIFICITY - EPS]
            # numbers candidates: the window holds the item's rarest number and its second
            at_win, item, _ = self.rarest.pairs(win, key)
            ok = np.flatnonzero(holds(at_win * v + self.second[item]))
            numbers = distinct(at_win[ok] * n + item[ok])
            if not len(story) + len(numbers):
                return out
            numbers, named, shares = self._numbers(holds, numbers // n, numbers % n)
        finally:
            if dense:
                self.dense[cells] = False
        story = np.concatenate([story, named])
        if len(story):
            found = self._story(self._every_word(story, ids, per_text, text_end, width), story // n, story % n, shares)
            numbers = tuple(np.concatenate(a) for a in zip(numbers, found, strict=True))
        win, item, component, score, required = numbers
        if not len(win):
            return out
        text = win // width
        order = np.lexsort((component, -score, item, text))  # per (text, item): its best window, story first
        text, item, component, score, required = (a[order] for a in (text, item, component, score, required))
        first = np.ones(len(text), bool)
        first[1:] = (text[1:] != text[:-1]) | (item[1:] != item[:-1])
        return text[first], item[first], component[first], score[first], required[first]

    def matched(self, ids: np.ndarray, per_text: np.ndarray, text: np.ndarray, item: np.ndarray, vocab: list[str]
                ) -> list[dict[str, list[str]]]:
        """Per (text, item) pair of a batch (`ids`, `per_text`: its texts' word ids, `vocab`: the pinned words),
        what of the item the text holds, so that a reader sees why it is close: the item's numbers in its
        own order (question, answer, passage), and its other words, rarest first (MATCHED_WORDS at most)."""
        v, pairs = self.n_keys, len(text)
        if not pairs:
            return []
        end = np.cumsum(per_text)
        texts = distinct(text)
        at = ranges(end[texts] - per_text[texts], per_text[texts])
        local = np.repeat(np.arange(len(texts)), per_text[texts])
        mine = np.flatnonzero(ids[at] < v)
        cells = local[mine] * v + ids[at[mine]]
        counts = self.every_count[item]
        e, pair = ranges(self.every_start[item], counts), np.repeat(np.arange(pairs), counts)
        want = np.searchsorted(texts, text)[pair] * v + self.every[e]
        if len(texts) * v <= DENSE_CELLS:
            self.dense[cells] = True
            hit = np.flatnonzero(self.dense[want])
            self.dense[cells] = False
        else:
            hit = np.flatnonzero(_sorted(np.append(distinct(cells), _NONE))(want))
        e, pair = e[hit], pair[hit]
        key = self.every[e]
        number = self.number[key]
        order = np.lexsort((np.where(number, e, -self.evidence[key]), ~number, pair))
        key, pair, number = key[order], pair[order], number[order]
        n_numbers, n_held = np.bincount(pair[number], minlength=pairs), np.bincount(pair, minlength=pairs)
        rank = np.arange(len(key)) - (np.cumsum(n_held) - n_held)[pair] - n_numbers[pair]  # of the words: 0 the rarest
        shown = number | (rank < MATCHED_WORDS)
        words = [vocab[k] for k in key[shown].tolist()]
        cut = np.cumsum(np.bincount(pair[shown], minlength=pairs)).tolist()
        return [{"numbers": words[a:a + n], "words": words[a + n:b]}
                for a, b, n in zip([0, *cut[:-1]], cut, n_numbers.tolist(), strict=True)]

    def _windows(self, at, ids, per_text, text_end, width: int, scale: int = 1, text=None) -> tuple[np.ndarray, np.ndarray]:
        """(window * scale, key) of each word at `at` (in `text`, when known), in each of the (at most two)
        windows holding it: window k of a text spans its words [k, k + 2) * stride, and its last window runs
        to its end."""
        text = np.searchsorted(text_end, at, "right") if text is None else text
        win, key = text * width, ids[at]
        long = np.flatnonzero(per_text[text] > 2 * self.stride)
        if len(long):
            pos = at[long] - (text_end[text[long]] - per_text[text[long]])
            last, m = -(-per_text[text[long]] // self.stride) - 2, pos // self.stride
            base = win[long].copy()
            win[long] += np.minimum(m, last)
            win, key = np.concatenate([win, base + np.clip(m - 1, 0, last)]), np.concatenate([key, key[long]])
        return win * scale, key

    def _every_word(self, pairs, ids, per_text, text_end, width):
        """Membership in the window * n_keys + key cells of every reference word of the texts `pairs` name."""
        v = self.n_keys
        texts = distinct(pairs // self.n_items // width)
        at = ranges(text_end[texts] - per_text[texts], per_text[texts])
        return _sorted(np.append(distinct(np.add(*self._windows(at[ids[at] < v], ids, per_text, text_end, width, v))),
                                 _NONE))

    def _story(self, holds, win, item, named: np.ndarray):
        """The (window, item) pairs whose story passes: (window, item, component, score, required). The last
        pairs, as many as `named` (their numbers' shares) holds, have passed the numbers' bars with every
        number of their question, and need only some of the story."""
        v = self.n_keys
        story, plain = np.zeros(len(item)), np.zeros(len(item))
        for sets in (self.q_story, self.all_story):
            held, _, top = sets.held(holds, win, item, v, top=True)
            specific, _, _ = sets.held(holds, win, item, v, self.specific)
            total, top_w = sets.total[item], sets.top_w[item]
            without = held - np.where(top >= top_w, top_w, 0.0)  # leaving the item's heaviest word out
            with np.errstate(divide="ignore", invalid="ignore"):
                whole = np.nan_to_num(held / total)
                share = np.minimum(whole, np.nan_to_num(without / (total - top_w)))
            plain = np.maximum(plain, whole)
            story = np.maximum(story, np.where(specific >= SPECIFICITY - EPS, share, 0.0))
        numbers = np.arange(len(item)) >= len(item) - len(named)
        story[numbers] = named
        ok = np.where(numbers, plain >= STORY_WITH_NUMBERS - EPS, story >= STORY_SHARE - EPS)
        component = np.where(numbers, NUMBERS, STORY)[ok]
        return win[ok], item[ok], component, story[ok], np.where(component == STORY, STORY_SHARE, NUMBERS_SHARE)

    def _numbers(self, holds, win, item):
        """The (window, item) pairs whose numbers pass alone (rare enough, as `_story` returns them), and
        those that pass if the row also holds some of the item's story and every number of its question
        (as window * n_items + item, and their shares)."""
        v = self.n_keys
        e, k, _ = self.all_numbers.held(holds, win, item, v)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.nan_to_num(e / self.all_numbers.total[item])
        enough = (k >= MIN_NUMBERS) & (share >= NUMBERS_SHARE - EPS) & (e >= self.ln_n - EPS)
        win, item, e, k, share = win[enough], item[enough], e[enough], k[enough], share[enough]
        ok = e >= self.ln_n + CHANCE - EPS
        _, qk, _ = self.q_numbers.held(holds, win, item, v)
        # every number of the item, its answer's too: a sibling of a date or a code template shares some of
        # an item's numbers by chance (the day and the year), never all of them
        named = ~ok & (qk == self.q_numbers.count[item]) & (qk >= 2) & (k == self.all_numbers.count[item])
        passed = win[ok], item[ok], np.full(int(ok.sum()), NUMBERS), share[ok], np.full(int(ok.sum()), NUMBERS_SHARE)
        return passed, win[named] * self.n_items + item[named], share[named]


class Postings:
    """key -> (item, weight) entries, sorted by key."""

    def __init__(self, keys: np.ndarray, items: np.ndarray, weights: np.ndarray, n_keys: int):
        order = np.argsort(keys, kind="stable")
        self.item, self.w = items[order], weights[order]
        self.start = np.searchsorted(keys[order], np.arange(n_keys + 2))

    def pairs(self, win: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (window, item) pairs the (window, key) pairs reach, and the entry each came from."""
        counts = self.start[key + 1] - self.start[key]
        e = ranges(self.start[key], counts)
        return np.repeat(win, counts), self.item[e], e

    def sums(self, win: np.ndarray, key: np.ndarray, n_items: int) -> tuple[np.ndarray, np.ndarray]:
        """The window * n_items + item pairs the (window, key) pairs reach, and each pair's weight."""
        win, item, e = self.pairs(win, key)
        pairs, inverse = distinct_inverse(win * n_items + item)
        return pairs, np.bincount(inverse, self.w[e], len(pairs))


def _width(per_text: np.ndarray, stride: int) -> int:
    """Windows per text in a batch's window numbering (text * width + window)."""
    return int(-(-int(per_text.max(initial=0)) // stride)) + 1
