"""Two families of short test items, unlike each other, each as a task's generator would write them, with
the variants a close-variant check must catch and the siblings it must spare.

- `WORD_PROBLEMS`: two-number word problems in one or two sentences (a person, an object, an operation).
- `CONVERSIONS`: one-number unit conversions about a person or a thing (the units are the operation).

Each family writes an item from a template and its slots (`item`); a planted variant keeps the item's
numbers and answer and either its template under other names (`renamed`) or other wording of the same
operation (`reworded`, from templates the family's generator never uses). Items are short enough that the
judge's n-gram score skips them (fewer than 20 tokens in all)."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark", "Randy", "Joy",
         "Carla", "Gerald", "Toula", "Billy", "Greg", "Mandy", "Hasan", "Priya", "Mateo", "Ingrid", "Kofi", "Yuki"]
OBJECTS = ["apples", "pens", "cards", "shells", "books", "eggs", "cups", "toys", "stamps", "beads", "coins", "kites"]
THINGS = ["suitcase", "parcel", "dog", "bucket", "crate", "ladder", "rope", "pumpkin", "statue", "tank", "bench",
          "banner"]



@dataclass(frozen=True)
class Family:
    """Templates (`{a}` a name, `{o}` an object or thing, `{x}`, `{y}` the numbers) with the operation each
    implies, and for each operation the other wordings a rewording draws from."""

    templates: list[tuple[str, str]]  # (template, operation)
    rewordings: dict[str, list[str]]
    operations: dict[str, Callable[..., int]]
    objects: list[str]
    numbers: Callable[[random.Random], tuple[int, ...]]

    def item(self, t: int, nums: tuple[int, ...], name: str, obj: str) -> tuple[str, str]:
        template, op = self.templates[t]
        return self.fill(template, nums, name, obj), str(self.operations[op](*nums))

    def fill(self, template: str, nums: tuple[int, ...], name: str, obj: str) -> str:
        return template.format(a=name, o=obj, **dict(zip("xy", nums, strict=False)))

    def draw(self, rng: random.Random) -> tuple[int, tuple[int, ...], str, str]:
        """A template, its numbers and its names, as the task's generator draws them."""
        return rng.randrange(len(self.templates)), self.numbers(rng), rng.choice(NAMES), rng.choice(self.objects)

    def reference(self, rng: random.Random, n: int = 300) -> list[tuple[int, tuple[int, ...], str, str]]:
        """`n` items with distinct numbers (a task's test set: no two items share their question's numbers)."""
        out, seen = [], set()
        while len(out) < n:
            t, nums, name, obj = self.draw(rng)
            if nums not in seen:
                seen.add(nums)
                out.append((t, nums, name, obj))
        return out

    def renamed(self, rng: random.Random, key: tuple) -> tuple[str, str]:
        """The item's template and numbers, another name and object: (question, answer)."""
        t, nums, name, obj = key
        return self.item(t, nums, rng.choice([n for n in NAMES if n != name]),
                         rng.choice([o for o in self.objects if o != obj]))

    def reworded(self, rng: random.Random, key: tuple) -> tuple[str, str]:
        """The item's numbers and answer in another wording of its operation, names kept or not."""
        t, nums, name, obj = key
        template, op = self.templates[t]
        return self.fill(rng.choice(self.rewordings[op]), nums, rng.choice(NAMES), obj), str(
            self.operations[op](*nums))


def _two(rng: random.Random) -> tuple[int, int]:
    x = rng.randrange(10, 99)
    return x, rng.randrange(2, x)


WORD_PROBLEMS = Family(
    templates=[
        ("{a} picks {x} {o} and then {y} more. How many {o} now?", "add"),
        ("{a} had {x} {o} but lost {y}. How many are left?", "sub"),
        ("Each bag has {x} {o}. How many {o} in {y} bags?", "mul"),
        ("{a} saves {x} {o} a week. How many after {y} weeks?", "mul"),
        ("{a} owns {x} {o} and sells {y}. How many remain?", "sub"),
        ("A shelf holds {x} {o} and a box {y}. How many in all?", "add"),
        ("{a} gives {x} {o} to each of {y} friends. How many given?", "mul"),
        ("{a} found {x} {o} on Monday and {y} on Friday. Total?", "add"),
    ],
    rewordings={
        "add": ["After getting {y} more {o}, {a} counts them again; {a} started with {x}. What is the count?",
                "If {a} puts {x} {o} and another {y} {o} together, how many {o} are there?",
                "{a} collected {x} {o} in the morning and {y} in the evening. Find the total."],
        "sub": ["{a} started with {x} {o}; {y} of them were taken. What number is still there?",
                "Out of {x} {o}, {a} used {y}. How many {o} were not used?",
                "What is left of {x} {o} once {a} removes {y} of them?"],
        "mul": ["{a} fills {y} trays with {x} {o} on every tray. Count the {o}.",
                "What do {y} groups of {x} {o} come to, for {a}?",
                "There are {y} rows of {o}, {x} in each row. How many {o} does {a} see?"],
    },
    operations={"add": operator.add, "sub": operator.sub, "mul": operator.mul},
    objects=OBJECTS,
    numbers=_two,
)

UNITS = {"kg-g": 1000, "m-cm": 100, "h-min": 60, "d-h": 24, "l-ml": 1000, "km-m": 1000, "ft-in": 12, "wk-d": 7}
CONVERSIONS = Family(
    templates=[
        ("{a}'s {o} weighs {x} kilograms. How many grams is that?", "kg-g"),
        ("{a}'s {o} is {x} meters long. How many centimeters?", "m-cm"),
        ("{a} waited {x} hours for the {o}. In minutes?", "h-min"),
        ("The {o} took {a} {x} days to build. How many hours?", "d-h"),
        ("{a}'s {o} holds {x} liters. How many milliliters?", "l-ml"),
        ("{a} carried the {o} {x} kilometers. How many meters?", "km-m"),
        ("{a}'s {o} is {x} feet tall. How many inches?", "ft-in"),
        ("{a} painted the {o} for {x} weeks. How many days?", "wk-d"),
    ],
    rewordings={
        "kg-g": ["Convert {x} kilograms into grams.", "What is the mass in grams of {x} kilograms of {o}?"],
        "m-cm": ["Express {x} meters in centimeters.", "A length of {x} meters equals how many centimeters?"],
        "h-min": ["How many minutes are there in {x} hours?", "Turn {x} hours into minutes."],
        "d-h": ["How many hours make up {x} days?", "Convert {x} days to hours."],
        "l-ml": ["How many milliliters are in {x} liters of water?", "Write {x} liters as milliliters."],
        "km-m": ["Convert a distance of {x} kilometers to meters.", "How many meters is a {x} kilometer walk?"],
        "ft-in": ["How many inches are in {x} feet?", "Express a height of {x} feet in inches."],
        "wk-d": ["How many days are in {x} weeks?", "Convert {x} weeks into days."],
    },
    operations={op: partial(operator.mul, f) for op, f in UNITS.items()},
    objects=THINGS,
    numbers=lambda rng: (rng.randrange(2, 2000),),
)
FAMILIES = {"word problems": WORD_PROBLEMS, "conversions": CONVERSIONS}
