"""A chat model behind any OpenAI-compatible endpoint, through the ``openai`` SDK.

Configuration: ``--llm-url`` / ``R3_LLM_URL`` (base URL, e.g. http://127.0.0.1:8000/v1),
``--llm-model`` / ``R3_LLM_MODEL`` and ``--llm-key`` / ``OPENAI_API_KEY`` (local servers
usually take any key). No URL and no model configured means "no model": callers fall back
to their rule-based path.
"""

import os
from dataclasses import dataclass
from typing import List, Optional

from ..errors import R3Error


class ModelError(R3Error):
    """The model endpoint is unreachable, refused the request or answered nothing usable."""


@dataclass
class ModelConfig:
    url: Optional[str]
    model: str
    key: str
    timeout: float = 120.0


def add_arguments(parser):
    """The ``--llm-*`` options every model-using command takes."""
    parser.add_argument("--llm-url", default=None,
                        help="OpenAI-compatible endpoint base URL (default: $R3_LLM_URL)")
    parser.add_argument("--llm-model", default=None, help="model name (default: $R3_LLM_MODEL)")
    parser.add_argument("--llm-key", default=None, help="API key (default: $OPENAI_API_KEY)")


def resolve(url=None, model=None, key=None, timeout=120.0) -> Optional[ModelConfig]:
    """The configured model, or None when neither a URL nor a model name is configured."""
    url = url or os.environ.get("R3_LLM_URL") or None
    model = model or os.environ.get("R3_LLM_MODEL") or None
    if not url and not model:
        return None
    if not model:
        raise ModelError("a model endpoint is configured (%s) but no model name: pass --llm-model "
                         "or set R3_LLM_MODEL" % url)
    key = key or os.environ.get("OPENAI_API_KEY") or "none"
    return ModelConfig(url, model, key, timeout)


class ChatModel:
    """``complete(messages) -> str``; every failure is one ModelError line."""

    def __init__(self, config: ModelConfig):
        try:
            import openai
        except ImportError:
            raise ModelError("the openai package is not installed (pip install openai)")
        self._openai = openai
        self.config = config
        self.client = openai.OpenAI(base_url=config.url, api_key=config.key,
                                    timeout=config.timeout, max_retries=1)

    def complete(self, messages: List[dict], temperature=0.2, max_tokens=4096) -> str:
        oa = self._openai
        where = self.config.url or "the default OpenAI endpoint"
        try:
            resp = self.client.chat.completions.create(
                model=self.config.model, messages=messages, temperature=temperature,
                max_tokens=max_tokens)
        except oa.APITimeoutError:
            raise ModelError("model endpoint %s timed out after %ss" % (where, self.config.timeout))
        except oa.APIConnectionError as err:
            cause = err.__cause__ or err
            raise ModelError("model endpoint %s is unreachable: %s" % (where, str(cause).splitlines()[0] if str(cause) else type(cause).__name__))
        except oa.AuthenticationError:
            raise ModelError("model endpoint %s rejected the API key (set --llm-key or OPENAI_API_KEY)" % where)
        except oa.NotFoundError:
            raise ModelError("model endpoint %s does not serve model %r" % (where, self.config.model))
        except oa.APIStatusError as err:
            raise ModelError("model endpoint %s answered HTTP %s" % (where, err.status_code))
        except oa.OpenAIError as err:
            raise ModelError("model request to %s failed: %s" % (where, str(err).splitlines()[0]))
        try:
            text = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            text = None
        if not text:
            raise ModelError("model %r at %s returned an empty answer" % (self.config.model, where))
        return text
