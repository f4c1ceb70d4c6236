"""Chat templates (jinja2 sandbox); tool-call formats and reasoning split come later."""
from llamay.chat.template import ChatTemplate, ChatTemplateError, default_template

__all__ = ["ChatTemplate", "ChatTemplateError", "default_template"]
