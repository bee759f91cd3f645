# The upstream of run.sh's CPU rounds: nginx (one worker, on CPU 0) serving
# stream.sse (stream.py's OpenAI stream) as text/event-stream, for any path,
# keep-alive. @LISTEN@, @OUT@ and @WRITES@ (how nginx writes the body: in
# writes of about one event, or all at once) are filled in by run.sh.
worker_processes 1;
daemon off;
pid @OUT@/nginx.pid;
error_log @OUT@/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path @OUT@/nginx-tmp;
  proxy_temp_path @OUT@/nginx-tmp;
  fastcgi_temp_path @OUT@/nginx-tmp;
  uwsgi_temp_path @OUT@/nginx-tmp;
  scgi_temp_path @OUT@/nginx-tmp;
  server {
    listen @LISTEN@;
    keepalive_requests 1000000;
    etag off;
    types { }
    default_type text/event-stream;
    location / {
      @WRITES@
      add_header Cache-Control no-cache;
      root @OUT@;
      try_files /stream.sse =404;
    }
  }
}
