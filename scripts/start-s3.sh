#!/usr/bin/env bash
# Installs (Debian 12 packages) and starts a local S3 server: OpenStack Swift with its s3api middleware, one
# replica on loopback, storage in a plain directory (mount_check = false). Idempotent: a second run finds the
# running proxy and only makes sure the bucket exists. Run as root.
#
# Prints shell exports on stdout, so `eval "$(bash scripts/start-s3.sh)"` configures a shell:
#   AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY BURROW_SNAPSHOT_STORE
#
# Settings (environment):
#   BURROW_S3_DIR     where config, rings, logs and objects live   @default /var/tmp/burrow-s3
#   BURROW_S3_PORT    the S3 (proxy) port on 127.0.0.1             @default 18480 (ports PORT-80..PORT-77 and
#                     PORT-69 are taken for the object, container and account servers and memcached)
#   BURROW_S3_BUCKET  the bucket to create                         @default burrow
#
# Stop: kill the PIDs in $BURROW_S3_DIR/run/*.pid.
set -euo pipefail
exec 3>&1 1>&2   # only the exports go to stdout

dir="${BURROW_S3_DIR:-/var/tmp/burrow-s3}"
port="${BURROW_S3_PORT:-18480}"
bucket="${BURROW_S3_BUCKET:-burrow}"
object_port=$((port - 80)) container_port=$((port - 79)) account_port=$((port - 78)) memcached_port=$((port - 69))
endpoint="http://127.0.0.1:${port}"
access_key='test:tester' secret_key='testing' region='us-east-1'

print_exports() {
  printf 'export AWS_ENDPOINT_URL=%q AWS_REGION=%q AWS_ACCESS_KEY_ID=%q AWS_SECRET_ACCESS_KEY=%q BURROW_SNAPSHOT_STORE=%q\n' \
    "$endpoint" "$region" "$access_key" "$secret_key" "s3://${bucket}/snapshots" >&3
}

healthy() { curl -fsS -m 2 "${endpoint}/healthcheck" >/dev/null 2>&1; }

# The bucket is a Swift container of the tempauth account: made through Swift's own API, so no S3 signing tool
# is needed here. PUT on an existing container answers 202 and changes nothing.
ensure_bucket() {
  local headers storage_url token
  headers="$(curl -fsS -m 10 -D - -o /dev/null -H "X-Auth-User: ${access_key}" -H "X-Auth-Key: ${secret_key}" \
    "${endpoint}/auth/v1.0")"
  storage_url="$(printf '%s' "$headers" | tr -d '\r' | sed -n 's/^[Xx]-[Ss]torage-[Uu]rl: //p')"
  token="$(printf '%s' "$headers" | tr -d '\r' | sed -n 's/^[Xx]-[Aa]uth-[Tt]oken: //p')"
  [ -n "$storage_url" ] && [ -n "$token" ] || { echo "start-s3: tempauth gave no token" >&2; exit 1; }
  curl -fsS -m 10 -X PUT -H "X-Auth-Token: ${token}" "${storage_url}/${bucket}" >/dev/null
}

if healthy; then
  ensure_bucket
  print_exports
  exit 0
fi

if [ "$(id -u)" != 0 ]; then echo "start-s3: run as root (sudo)" >&2; exit 1; fi

need=()
for pkg in swift swift-proxy swift-account swift-container swift-object python3-swift memcached curl; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "start-s3: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The packages' init scripts would start Debian's own Swift services on the standard ports: policy-rc.d
  # keeps them stopped during this install (an existing policy is kept as it is); the servers below are ours.
  policy=/usr/sbin/policy-rc.d
  if [ -e "$policy" ]; then
    apt-get install -y -q --no-install-recommends "${need[@]}"
  else
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
    apt-get install -y -q --no-install-recommends "${need[@]}"
    rm -f "$policy" && trap - EXIT
  fi
fi

# Swift reads its hash path prefix and suffix from the fixed /etc/swift/swift.conf; the values only need to stay
# the same for the life of the stored objects.
if ! grep -qs '^swift_hash_path_suffix' /etc/swift/swift.conf; then
  mkdir -p /etc/swift
  printf '[swift-hash]\nswift_hash_path_prefix = burrow-local\nswift_hash_path_suffix = burrow-local\n' \
    >/etc/swift/swift.conf
fi

mkdir -p "$dir/etc" "$dir/node/d1" "$dir/run" "$dir/log"
cd "$dir/etc"
for kind in object:$object_port container:$container_port account:$account_port; do
  name="${kind%%:*}" p="${kind##*:}"
  if [ ! -f "$name.ring.gz" ]; then
    swift-ring-builder "$name.builder" create 10 1 1 >/dev/null
    swift-ring-builder "$name.builder" add "r1z1-127.0.0.1:${p}/d1" 1 >/dev/null
    swift-ring-builder "$name.builder" rebalance >/dev/null
  fi
  cat >"$name-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = ${p}
devices = ${dir}/node
mount_check = false
swift_dir = ${dir}/etc
user = root
workers = 1
log_name = ${name}-server
log_facility = LOG_LOCAL0
log_level = WARNING

[pipeline:main]
pipeline = ${name}-server

[app:${name}-server]
use = egg:swift#${name}
CONF
done

cat >proxy-server.conf <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = ${port}
swift_dir = ${dir}/etc
user = root
workers = 1
log_level = WARNING

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:s3api]
use = egg:swift#s3api
location = ${region}

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = ${secret_key} .admin

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:${memcached_port}

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
CONF

# A daemon must not keep our stdout/stderr or fd 3, or whoever reads them (a `$(...)`, CI's log) waits forever.
start() {
  local name="$1"; shift
  local pidfile="$dir/run/$name.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return; fi
  setsid "$@" </dev/null >>"$dir/log/$name.log" 2>&1 3>&- &
  echo $! >"$pidfile"
}
start memcached memcached -u root -l 127.0.0.1 -p "$memcached_port" -U 0
for name in account container object proxy; do
  start "$name" "swift-$name-server" "$dir/etc/$name-server.conf"
done

for _ in $(seq 1 120); do healthy && break; sleep 0.25; done
healthy || { echo "start-s3: the proxy did not answer on ${endpoint}; logs in $dir/log" >&2; tail -n 20 "$dir"/log/*.log >&2; exit 1; }
# The account, container and object servers answer a little after the proxy: retry the bucket until they do.
for i in $(seq 1 40); do
  ensure_bucket 2>/dev/null && break
  [ "$i" = 40 ] && { ensure_bucket; exit 1; }
  sleep 0.25
done
print_exports
