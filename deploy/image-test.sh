#!/usr/bin/env bash
# Builds the root Dockerfile and runs its program the way a container runtime would, on a machine that
# reaches no container registry and cannot run a container:
#   1. a Go builder image made from this machine's own Go (podman import of a root file system holding
#      /usr/local/go, a shell and CA roots; nothing pulled), kept between runs under its Go version;
#   2. podman build --isolation=chroot --format docker of the Dockerfile with GO_IMAGE set to it, the
#      modules served from this machine's module cache (GOPROXY=file://), the version from git;
#   3. the image's file system exported, and its program run under chroot as the image's USER with the
#      image's environment: --version names the version given; serve without tokens stops and names
#      COMPANION_TOKENS_FILE; serve with a token file (a Docker secret's path) answers /readyz and a
#      guarded write; the image's HEALTHCHECK command exits 0 while it runs and 1 after it stopped;
#   4. the embedded CA roots: the image's binary links golang.org/x/crypto/x509roots/fallback, and in the
#      image's file system (no CA file in it) Go's system roots are that set: deploy/roots's test, run
#      there, verifies a public root with them and refuses an unknown CA.
# Prints the image's size and ends with "image: N passed, M failed". Installs podman when it is missing
# (apt-get, as root). When podman cannot build here for a reason of the machine's (no overlay, no
# chroot), it says so loudly and exits 0 unless IMAGE_TEST_STRICT=1: the lead decides.
#
#   bash deploy/image-test.sh            # from anywhere
#   IMAGE_TEST_KEEP=1 bash deploy/image-test.sh   # keeps the work directory (rootfs, logs)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
start=$(date +%s)
passed=0 failed=0
pass() { echo "ok    $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }
finish() {
	echo "image: took $(($(date +%s) - start))s"
	echo "image: ${passed} passed, ${failed} failed"
	[[ $failed -eq 0 ]]
	exit
}
machine() { # a reason of the machine's, not the project's
	echo "!!!!!!!! image-test: $* !!!!!!!!" >&2
	echo "!!!!!!!! the image was NOT built or checked on this machine !!!!!!!!" >&2
	if [[ ${IMAGE_TEST_STRICT:-} == 1 ]]; then fail "$*"; fi
	finish
}

if ! command -v podman >/dev/null; then
	if [[ $(id -u) -ne 0 ]]; then machine "podman is missing and only root installs it (apt-get install podman)"; fi
	echo "installing podman (apt-get)"
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman; } >/dev/null 2>&1 ||
		machine "apt-get install podman failed"
fi

work=$(mktemp -d /tmp/companion-image.XXXXXX)
pid=
cleanup() {
	if [[ -n $pid ]]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
	if [[ -n ${ctr:-} ]]; then podman rm -f "$ctr" >/dev/null 2>&1; fi
	if [[ ${IMAGE_TEST_KEEP:-} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# 1. The builder image: this machine's Go, a shell (its dash and the libraries it loads) and CA roots.
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
builder="localhost/companion-go-builder:${gover}"
if podman image exists "$builder"; then
	echo "builder: $builder (kept from an earlier run)"
else
	t=$(date +%s)
	fs="$work/builder"
	mkdir -p "$fs/usr/local" "$fs/bin" "$fs/tmp" "$fs/etc/ssl/certs" "$fs/go" "$fs/root"
	chmod 1777 "$fs/tmp"
	tar -C "$(dirname "$goroot")" --exclude="$(basename "$goroot")/test" --exclude="$(basename "$goroot")/api" \
		-cf - "$(basename "$goroot")" | tar -C "$fs/usr/local" -xf -
	[[ $(basename "$goroot") == go ]] || mv "$fs/usr/local/$(basename "$goroot")" "$fs/usr/local/go"
	sh=$(readlink -f /bin/sh)
	cp "$sh" "$fs/bin/sh"
	for lib in $(ldd "$sh" | grep -o '/[^ ]*'); do
		mkdir -p "$fs$(dirname "$lib")"
		cp -L "$lib" "$fs$lib"
	done
	cp -L /etc/ssl/certs/ca-certificates.crt "$fs/etc/ssl/certs/"
	tar -C "$fs" -cf "$work/builder.tar" . &&
		podman import --quiet --change 'ENV PATH=/go/bin:/usr/local/go/bin:/bin' --change 'ENV GOPATH=/go' \
			--change 'ENV GOTOOLCHAIN=local' --change 'ENV HOME=/root' --change 'WORKDIR /go' \
			"$work/builder.tar" "$builder" >/dev/null ||
		machine "podman import of the Go builder failed"
	rm -rf "$fs" "$work/builder.tar"
	echo "builder: $builder imported in $(($(date +%s) - t))s"
fi

# 2. The image. The modules come from this machine's module cache, served as a file proxy (filled here
# when a module is missing: go mod download asks the module proxy only for those).
go mod download || fail "go mod download"
version=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
image="localhost/companion:image-test"
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null)
t=$(date +%s)
if ! podman build --isolation=chroot --format docker --layers=false --build-arg GO_IMAGE="$builder" --build-arg VERSION="$version" \
	--build-arg GOPROXY=file:///goproxy --volume "$(go env GOMODCACHE)/cache/download:/goproxy:ro" \
	-t "$image" . >"$work/build.log" 2>&1; then
	tail -30 "$work/build.log"
	if grep -qiE 'overlay|chroot|operation not permitted|mount' "$work/build.log" && ! grep -q 'go: \|\.go:[0-9]' "$work/build.log"; then
		machine "podman build cannot run here (see above)"
	fi
	fail "podman build of the Dockerfile"
	finish
fi
pass "podman build --isolation=chroot --format docker: $(($(date +%s) - t))s"
# The image this run replaced, untagged now: not kept (a run leaves one image).
if [[ -n $previous && $previous != "$(podman image inspect --format '{{.Id}}' "$image")" ]]; then
	podman rmi "$previous" >/dev/null 2>&1
fi
size=$(podman image inspect --format '{{.Size}}' "$image")
mb=$(awk "BEGIN { printf \"%.1f\", $size / 1000000 }")
if [[ $size -lt 40000000 ]]; then pass "image size ${mb} MB (goal: under 40 MB)"; else fail "image size ${mb} MB, over 40 MB"; fi

user=$(podman image inspect --format '{{.Config.User}}' "$image")
mapfile -t envs < <(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image" | grep .)
check=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$image")
entry=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$image")
echo "image: USER $user; ENV ${envs[*]}; HEALTHCHECK $check; ENTRYPOINT $entry"
[[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] && pass "USER is numeric and not root ($user)" || fail "USER $user"
[[ $check == '["CMD","/companion","healthcheck"]' ]] && pass "HEALTHCHECK runs the image's program" || fail "HEALTHCHECK $check"
[[ $entry == '["/companion"]' ]] || fail "ENTRYPOINT $entry"

# 3. The file system, and the program run from it as the image's USER with the image's environment.
rootfs="$work/rootfs"
mkdir -p "$rootfs"
ctr=$(podman create "$image") && podman export "$ctr" | tar -C "$rootfs" --numeric-owner -xpf - || { fail "export"; finish; }
podman rm -f "$ctr" >/dev/null 2>&1
ctr=
ls "$rootfs"/bin/sh "$rootfs"/etc/ssl 2>/dev/null && fail "the image holds a shell or CA files" || pass "no shell, no CA files in the image: $(cd "$rootfs" && find . -mindepth 1 -maxdepth 1 | sort | tr '\n' ' ')"
uid=${user%%:*}
gid=${user#*:}
[[ $gid == "$user" ]] && gid=$uid
out=$(env -i "${envs[@]}" chroot --userspec="$uid:$gid" "$rootfs" /companion --version 2>&1)
[[ $out == "companion $version "* ]] && pass "--version: $out" || fail "--version: $out (want $version)"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
out=$(timeout 20 env -i "${envs[@]}" COMPANION_ADDR="0.0.0.0:$port" chroot --userspec="$uid:$gid" "$rootfs" /companion serve 2>&1)
rc=$?
[[ $rc -ne 0 && $out == *COMPANION_TOKENS_FILE* ]] && pass "serve without tokens on 0.0.0.0 stops (exit $rc), naming COMPANION_TOKENS_FILE" ||
	fail "serve without tokens: exit $rc: $out"

# A Docker secret: a file under /run/secrets, readable by the image's user.
secret="image-test-$(date +%s)-0123456789"
mkdir -p "$rootfs/run/secrets"
echo "n8n:default:workflow:$secret" >"$rootfs/run/secrets/companion_tokens"
chmod 0444 "$rootfs/run/secrets/companion_tokens"
env -i "${envs[@]}" COMPANION_ADDR="0.0.0.0:$port" COMPANION_TOKENS_FILE=/run/secrets/companion_tokens \
	chroot --userspec="$uid:$gid" "$rootfs" /companion serve >"$work/serve.log" 2>&1 &
pid=$!
# The HEALTHCHECK command, as the runtime runs it: in the image, as its user, with its environment.
healthcheck() { env -i "${envs[@]}" COMPANION_ADDR="0.0.0.0:$port" chroot --userspec="$uid:$gid" "$rootfs" $(jq -r '.[1:][]' <<<"$check") 2>&1; }
ready=
for _ in $(seq 1 100); do
	if hc=$(healthcheck); then ready=1; break; fi
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.2
done
if [[ -n $ready ]]; then pass "HEALTHCHECK exits 0 while serve runs: $hc"; else fail "HEALTHCHECK never passed: $hc"; cat "$work/serve.log"; fi
body=$(curl -s "http://127.0.0.1:$port/readyz")
[[ $body == *'"status":"ready"'* ]] && pass "GET /readyz: $body" || fail "GET /readyz: $body"
body=$(curl -s -H "Authorization: Bearer $secret" -H 'Content-Type: application/json' \
	-d '{"key":"image-test-1","payload":{"amount":1}}' "http://127.0.0.1:$port/v1/before-write")
[[ $body == *'"decision":"proceed"'* ]] && pass "a guarded write's before-write: proceed" || fail "before-write: $body"
[[ $(stat -c %u "$rootfs/data/companion.db") == "$uid" ]] && pass "the ledger is written in /data as uid $uid" || fail "no ledger in /data: $(ls -la "$rootfs/data")"
grep -q "\"msg\":\"companion $version serving on http://" "$work/serve.log" && pass "the start line names $version" || fail "start line: $(head -3 "$work/serve.log")"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[[ $rc -eq 0 ]] && pass "serve stops on SIGTERM with exit 0" || fail "serve exit $rc after SIGTERM"
hc=$(healthcheck)
rc=$?
[[ $rc -eq 1 ]] && pass "HEALTHCHECK exits 1 after serve stopped: $hc" || fail "HEALTHCHECK after stop: exit $rc: $hc"

# 4. The embedded CA roots.
go version -m "$rootfs/companion" | grep -q 'golang.org/x/crypto/x509roots/fallback' &&
	pass "the image's binary links golang.org/x/crypto/x509roots/fallback" || fail "x509roots/fallback not linked"
if CGO_ENABLED=0 go test -c -o "$rootfs/tmp-roots.test" ./deploy/roots >"$work/roots-build.log" 2>&1; then
	cp -r deploy/roots/testdata "$rootfs/testdata"
	out=$(env -i "${envs[@]}" chroot --userspec="$uid:$gid" "$rootfs" /tmp-roots.test -test.v -test.run 'TestEmbeddedRoots' 2>&1)
	rc=$?
	[[ $rc -eq 0 && $out == *"system roots: the embedded set"* ]] && pass "in the image's file system: $(grep -o 'system roots: .*' <<<"$out" | head -1)" ||
		fail "embedded roots in the image: exit $rc: $out"
	rm -rf "$rootfs/tmp-roots.test" "$rootfs/testdata"
else
	fail "go test -c ./deploy/roots: $(tail -5 "$work/roots-build.log")"
fi
finish
