# modes.sh: sluice keyed on the harness's API-key header, never refusing,
# hybrid store (redis-server on 127.0.0.1:16479, which modes.sh starts).
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18199"

[store]
backend = "redis"

[store.redis]
url = "redis://127.0.0.1:16479"
mode = "hybrid"

[[rule]]
name = "per-key"
key = ["header:{key_header}"]
rate = "1000000000/s"
