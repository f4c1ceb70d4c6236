"""Chat: the model's chat template (jinja2 sandbox, under render limits) turning messages into prompt
ids, Ollama's plain Go templates (gotemplate.py) and the reasoning splitter of model output
(reasoning.py). Imports nothing else of llamay."""
from llamay.chat.limits import DEFAULT_LIMITS, RenderLimits
from llamay.chat.prompt import prompt_ids, template_for
from llamay.chat.template import (ChatTemplate, ChatTemplateCancelled, ChatTemplateError, ChatTemplateLimit,
                                  default_template)

__all__ = ["DEFAULT_LIMITS", "ChatTemplate", "ChatTemplateCancelled", "ChatTemplateError", "ChatTemplateLimit",
           "RenderLimits", "default_template", "prompt_ids", "template_for"]
