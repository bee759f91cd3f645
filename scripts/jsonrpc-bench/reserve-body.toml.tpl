# sluice with one rule that never refuses, keyed on ["header:x-api-key"], with:
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "calls"
key = ["header:x-api-key"]
rate = "1000000000/s"
burst = 1000000000
charge = "json:/usage/total_tokens"
reserve = { "body:/max_tokens" = 1 }
