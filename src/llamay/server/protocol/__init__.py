"""Pure converters between each API's wire format and the internal model (base.py); no I/O here."""
