"""Chat templates (jinja2 sandbox, under render limits) and messages -> prompt ids."""
from llamay.chat.limits import DEFAULT_LIMITS, RenderLimits
from llamay.chat.prompt import prompt_ids, template_for
from llamay.chat.template import (ChatTemplate, ChatTemplateCancelled, ChatTemplateError, ChatTemplateLimit,
                                  default_template)

__all__ = ["DEFAULT_LIMITS", "ChatTemplate", "ChatTemplateCancelled", "ChatTemplateError", "ChatTemplateLimit",
           "RenderLimits", "default_template", "prompt_ids", "template_for"]
