"""`llamay route`: one address in front of several `llamay serve` processes, sending requests that share a
prompt prefix to the same server (consistent hashing on the prompt's first page, bounded loads), with
health checks and failover."""
