"""`llamay run --json-schema / --grammar-file`: the output follows them (checked with jsonschema and the
grammar's own language), and a schema the compiler refuses is a one-line error."""
import json

import jsonschema
import pytest

from llamay.cli.main import main

SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                           "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
          "required": ["city", "population"], "additionalProperties": False}


@pytest.mark.model
def test_run_follows_a_schema_and_a_grammar(smollm_path, tmp_path, capsys):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA))
    assert main(["run", "-m", str(smollm_path), "-p", "A city as JSON:", "--json-schema", str(schema),
                 "--temp", "1", "--seed", "1", "-n", "60"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMA)
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= ("yes" | "no") "."')
    assert main(["run", "-m", str(smollm_path), "-p", "Is ice cold?", "--grammar-file", str(grammar),
                 "--temp", "1", "--seed", "2", "-n", "8"]) == 0
    assert capsys.readouterr().out.strip() in ("yes.", "no.")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "array", "uniqueItems": True}))
    assert main(["run", "-m", str(smollm_path), "-p", "x", "--json-schema", str(bad)]) == 1
    assert "uniqueItems" in capsys.readouterr().err
