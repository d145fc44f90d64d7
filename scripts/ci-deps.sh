#!/usr/bin/env bash
# Installs what the tests need from Debian's packages when it is missing:
# Chromium (browser tests through chromedp) and redis-server (the external
# Redis mode and the broker compatibility suite).
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)

if [ ${#need[@]} -eq 0 ]; then
	echo "ci-deps: chromium and redis-server are present"
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
