# ../shared/bench/sluice-pass.toml.tpl with tracing on, sample = 1, exporting
# to the sink collector (sink.conf, 127.0.0.1:18390; sluice appends /v1/traces).
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

[tracing]
otlp = "http://127.0.0.1:18390"
sample = 1
