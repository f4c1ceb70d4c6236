"""`llamay serve`: OpenAI, Anthropic, Ollama and llama-server APIs plus context routes on one address."""
