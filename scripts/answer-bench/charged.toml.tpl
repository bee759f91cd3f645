# The charged config of run.sh and timeline.py: one rule that never refuses
# and charges the usage an OpenAI-style stream reports in its last event.
# @LISTEN@, @ADMIN@ and @UPSTREAM@ are filled in by run.sh.
[server]
listen = "@LISTEN@"
upstream = "http://@UPSTREAM@"
workers = 1

[admin]
listen = "@ADMIN@"

[[rule]]
name = "tokens"
key = ["global"]
algorithm = "token_bucket"
rate = "1000000000/s"
charge = { "json:/usage/prompt_tokens" = 1, "json:/usage/completion_tokens" = 4 }
