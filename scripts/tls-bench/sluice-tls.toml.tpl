# sluice over TLS: the shared harness's pass config (one per-IP rule that never triggers:
# forwarding plus one decision) with [server.tls] on the certificate nginx serves too.
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}

[server.tls]
certs = [{ cert = "{cert}", key = "{key}" }]

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
