# sluice over TLS holding many idle connections: room for them (max_connections), and the
# first request awaited long enough that none is closed while memory is read (the handshake
# and the wait for the first request head both run against header_read_timeout).
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}
max_connections = {max_connections}
header_read_timeout = "120s"
idle_timeout = "120s"

[server.tls]
certs = [{ cert = "{cert}", key = "{key}" }]

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
