"""A small training corpus for the Python checks that run ./train on a text of their own."""
import random


def write_text(path):
    """About 30 kB of words (one token per byte): enough windows for training and validation."""
    rng = random.Random(7)
    words = ["in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "darkness"]
    with open(path, "w") as file:
        file.write(" ".join(rng.choice(words) for _ in range(5000)))
