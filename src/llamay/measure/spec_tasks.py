"""The speculative-decoding tasks `llamay bench --spec` and bench/spec.py time: rewriting a given code file
with a small change, listing the facts of a given document (both greedy), and free text with nothing to look
up (seeded sampling, so no greedy loop repeats itself); and a tool call repeating its arguments from the
prompt (greedy)."""
from __future__ import annotations

CODE = '''import json
from dataclasses import dataclass


@dataclass
class Account:
    owner: str
    balance: float = 0.0

    def deposit(self, amount: float) -> None:
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount

    def withdraw(self, amount: float) -> None:
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount

    def to_json(self) -> str:
        return json.dumps({"owner": self.owner, "balance": self.balance})


def total(accounts: list[Account]) -> float:
    return sum(a.balance for a in accounts)
'''
DOC = ("The Harbor Street Library reopened on 3 March after an eight-month renovation. The new reading room seats "
       "120 people and has 40 study desks with power outlets. Opening hours are 9:00 to 20:00 on weekdays and 10:00 "
       "to 16:00 on Saturdays; the library is closed on Sundays. Membership is free for residents of the county, and "
       "visitors can buy a day pass for 2 euros. The children's section moved to the ground floor, next to the cafe. "
       "Printing costs 10 cents per page in black and white and 50 cents per page in colour. The library also lends "
       "laptops for up to three hours to members with a valid card. Questions can be sent to "
       "info@harborlibrary.example or asked at the front desk.")
EMAIL = ("Hi Bob, the report for the third quarter of 2026 is attached. Revenue grew 12 percent to 4.1 million "
         "euros, mostly from the new subscription plans, and costs stayed flat. The board meets on 14 January to "
         "discuss the budget for next year; please send your comments on the draft by 9 January.")
GREEDY = dict(temperature=0.0)
SEEDED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=1)
TASKS = {  # name -> (prompt, sampling)
    "code": ("Original file:\n```python\n" + CODE + "```\n\nThe same file with the method withdraw renamed to "
             "take_out:\n```python\n", GREEDY),
    "doc": ("Notice:\n" + DOC + "\n\nThe facts in the notice, one per line, in its own words:\n- ", GREEDY),
    "tool": ("Tools: send_email(to: str, subject: str, body: str)\n\nUser: Email bob.jones@example.com with the "
             "subject \"Q3 2026 report\" and this body: \"" + EMAIL + "\"\n\nThe tool call, as JSON:\n"
             "{\"name\": \"send_email\", \"arguments\": {\"to\": \"", GREEDY),
    "free": ("Once upon a time, in a small village by the sea, there lived", SEEDED),
}
