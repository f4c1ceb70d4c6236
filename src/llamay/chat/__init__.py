"""Chat templates (jinja2 sandbox) and messages -> prompt ids; tool-call formats and reasoning split come later."""
from llamay.chat.prompt import prompt_ids, template_for
from llamay.chat.template import ChatTemplate, ChatTemplateError, default_template

__all__ = ["ChatTemplate", "ChatTemplateError", "default_template", "prompt_ids", "template_for"]
