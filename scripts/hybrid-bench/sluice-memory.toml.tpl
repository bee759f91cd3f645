# modes.sh: sluice keyed on the harness's API-key header, never refusing,
# memory store.
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18199"


[[rule]]
name = "per-key"
key = ["header:{key_header}"]
rate = "1000000000/s"
