# sluice holding many idle plain-HTTP connections (the TLS idle config without [server.tls]):
# what a connection costs before TLS.
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}
max_connections = {max_connections}
header_read_timeout = "120s"
idle_timeout = "120s"

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
