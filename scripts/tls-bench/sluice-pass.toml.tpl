# sluice with one per-IP rule that never triggers, access log off (the shared harness's pass
# config): the reference for sluice_log.
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
