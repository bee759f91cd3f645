# sluice_log: the pass config with the access log written to a file (one JSON line per
# request, through sluice's bounded buffer; the harness counts the lines and deletes the file).
[server]
listen = "{listen}"
upstream = "http://{upstream}"
workers = {workers}
access_log = "{tmp}/access.log"

[admin]
listen = "127.0.0.1:18199"

[[rule]]
name = "per-ip"
key = ["ip"]
rate = "1000000000/s"
