# /work/shared/bench/sluice-pass.toml.tpl with the store written out (memory, the default)
# and its own admin port: one per-IP rule that never triggers.
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18498"

[store]
backend = "memory"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
