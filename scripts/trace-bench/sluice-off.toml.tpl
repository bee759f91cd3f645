# ../shared/bench/sluice-pass.toml.tpl as it is: one per-IP rule that never
# triggers, no [tracing] (tracing off).
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
