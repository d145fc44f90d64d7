#!/usr/bin/env bash
# Installs what the tests need from Debian's packages when it is missing:
# Chromium (browser tests through chromedp), redis-server (the external
# Redis mode and the broker compatibility suite) and redis-sentinel (the
# Sentinel tests).
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)

if [ ${#need[@]} -eq 0 ]; then
	echo "ci-deps: chromium, redis-server and redis-sentinel are present"
	exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "ci-deps: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
# The Debian package starts a redis-server service; the tests start their own.
if [[ " ${need[*]} " == *" redis-server "* ]]; then
	$sudo systemctl stop redis-server 2>/dev/null || $sudo service redis-server stop 2>/dev/null || true
fi
if [[ " ${need[*]} " == *" redis-sentinel "* ]]; then
	$sudo systemctl stop redis-sentinel 2>/dev/null || $sudo service redis-sentinel stop 2>/dev/null || true
fi
