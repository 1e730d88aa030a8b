import pytest
import torch

# pytest -n 2 runs two workers on two cores: one thread each avoids oversubscription stalls.
torch.set_num_threads(1)

from workbench.corpus.vocab import vocabulary
from workbench.models.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(vocabulary())


@pytest.fixture(scope="session")
def tiny():
    """The embedded model and its tokenizer (loaded once per test session)."""
    from workbench.models import load

    return load("tiny", device="cpu")
