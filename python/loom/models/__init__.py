"""Models built as Loom jobs: gpt() (the reference GPT of loom-gpt and tests/oracle)."""

from loom.models.gpt import gpt, gpt_job
from loom.models.gpt_config import GptConfig
from loom.models.gpt_parameters import GptParameter, gpt_parameters

__all__ = ["gpt", "gpt_job", "GptConfig", "GptParameter", "gpt_parameters"]
