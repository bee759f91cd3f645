# /work/shared/bench/sluice-pass.toml.tpl on the Redis store (strict mode): one per-IP rule
# that never triggers, every decision one EVALSHA. proxybench.sh starts redis-server on 16479.
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[admin]
listen = "127.0.0.1:18499"

[store]
backend = "redis"

[store.redis]
url = "redis://127.0.0.1:16479"
timeout = "20ms"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
