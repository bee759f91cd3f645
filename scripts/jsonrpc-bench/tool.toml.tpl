# sluice with one rule that never refuses, keyed on ["header:x-api-key", "mcp:tool"]
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "calls"
key = ["header:x-api-key", "mcp:tool"]
rate = "1000000000/s"
burst = 1000000000

