# The baseline config of run.sh and timeline.py: charged.toml.tpl's rule
# without `charge` (nothing reads the body).
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
