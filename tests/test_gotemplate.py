"""Ollama's plain Go templates, checked against Go's text/template rules for the forms supported
(trim markers remove all adjacent white space; ref: pkg.go.dev/text/template, "Text and spaces")."""
import pytest

from llamay.chat.gotemplate import GoTemplateError, render_go


def test_fields_and_trims():
    t = "<s>{{ .System }}\n  {{- .Prompt -}}  \n[/INST]{{ .Response }}"
    assert render_go(t, "SYS", "hi") == "<s>SYShi[/INST]"
    assert render_go("{{.Prompt}} and {{ .System }}", "", "p") == "p and "


def test_other_actions_are_refused():
    with pytest.raises(GoTemplateError, match="not supported"):
        render_go("{{ if .System }}x{{ end }}", "s", "p")
